"""The reference interpreter and input binding."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from ember.runtime.executor import make_executor
from ember.runtime.interpreter import Interpreter, InterpreterError, bind_inputs, run_program
from ember.runtime.ir import (
    Graph,
    InputSpec,
    IRFormatError,
    Node,
    OutputSpec,
    Program,
    Signature,
    SourceLocation,
    SymbolRange,
    TensorMeta,
    ValueRef,
)
from ember.runtime.ir.graph import ShapeGuard, SymExpr
from ember.runtime.ir.printer import print_program
from ember.runtime.ir.symbolic import ShapeError
from handbuilt import ProgramBuilder, mlp_program


def test_runs_graph_with_parameters_given_explicitly() -> None:
    program, _ = mlp_program()
    x, w, b = torch.randn(2, 4), torch.randn(3, 4), torch.randn(3)
    (out,) = run_program(program, [x, w, b])
    torch.testing.assert_close(out, torch.relu(x @ w.T + b) * 2)


def test_missing_parameters_come_from_program_tensors() -> None:
    program, ex = mlp_program()
    x = torch.randn(2, 4)
    (out,) = run_program(program, [x])
    torch.testing.assert_close(out, torch.relu(x @ ex["w"].T + ex["b"]) * 2)


def test_bind_inputs_prefers_extra_over_program_tensors() -> None:
    program, _ = mlp_program()
    x, w2 = torch.randn(2, 4), torch.randn(3, 4)
    bound = bind_inputs(program, "forward", [x], extra={"fc.weight": w2})
    assert bound[0] is x and bound[1] is w2 and bound[2] is program.tensors["fc.bias"]


def test_bind_inputs_rejects_wrong_count() -> None:
    program, _ = mlp_program()
    with pytest.raises(ValueError, match="takes 3 inputs \\(1 without"):
        bind_inputs(program, "forward", [torch.randn(2, 4), torch.randn(3, 4)])


def test_multi_result_nodes_bind_by_index() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(4, 5))
    mx = pb.call("aten::max.dim", x, 1)
    parts = pb.call("aten::split.Tensor", x, 2)
    idx = pb.call("aten::add.Tensor", ValueRef(mx.node, 1), 1)
    cat = pb.call("aten::cat.default", (ValueRef(parts.node, 1), ValueRef(parts.node, 0)))
    program = pb.finish(ValueRef(mx.node, 0), idx, cat)
    t = torch.randn(4, 5)
    values, indices = t.max(1)
    out = run_program(program, [t])
    torch.testing.assert_close(out[0], values)
    torch.testing.assert_close(out[1], indices + 1)
    torch.testing.assert_close(out[2], torch.cat([t[2:], t[:2]]))


def test_get_attr_and_constant_read_program_tensors() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    c = pb.get_attr("scale", torch.tensor([1.0, 2.0, 3.0]), op="constant")
    w = pb.get_attr("w", torch.tensor([4.0, 5.0, 6.0]))
    y = pb.call("aten::mul.Tensor", x, c)
    z = pb.call("aten::add.Tensor", y, w, alpha=2)
    program = pb.finish(z)
    t = torch.randn(3)
    (out,) = run_program(program, [t])
    torch.testing.assert_close(out, t * torch.tensor([1.0, 2, 3]) + 2 * torch.tensor([4.0, 5, 6]))


def test_values_are_freed_after_last_use() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(8))
    a = pb.call("aten::mul.Tensor", x, 2)
    b = pb.call("aten::neg.default", a)
    c = pb.call("aten::sin.default", b)
    d = pb.call("aten::cos.default", c)
    program = pb.finish(d)
    seen: list[weakref.ref[torch.Tensor]] = []

    class Watching(Interpreter):
        def call(self, node: Node) -> object:
            if node.name == pb.nodes[4].name:  # running `cos`: `mul`'s result must be gone
                gc.collect()
                assert all(r() is None for r in seen), "intermediate kept alive"
                assert sorted(self.env) == [c.node]
            value = super().call(node)
            if node.name == a.node:
                seen.append(weakref.ref(value))
            return value

    t = torch.randn(8)
    (out,) = Watching(program).run(t)
    torch.testing.assert_close(out, torch.cos(torch.sin(-(t * 2))))


def test_op_error_names_node_and_source_line() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(2, 3))
    y = pb.input(torch.randn(3, 2))
    m = pb.call("aten::mm.default", x, y, line=42)
    program = pb.finish(m)
    with pytest.raises(InterpreterError, match=r"%v2 = aten::mm.default \(from model.py:42 in "
                                                r"forward\) failed: RuntimeError"):
        run_program(program, [torch.randn(2, 3), torch.randn(2, 2)])


def test_unknown_operator_fails_at_construction() -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(2))
    program = pb.finish(x)
    program.forward.nodes.insert(1, Node("bad", "call", "aten::not_an_op.default", (x,)))
    with pytest.raises(IRFormatError, match="aten::not_an_op"):
        Interpreter(program)


def test_unknown_graph_is_a_key_error() -> None:
    program, _ = mlp_program()
    with pytest.raises(KeyError, match="backward"):
        run_program(program, [torch.randn(2, 4)], graph="backward")


def test_interpreter_is_reusable_across_runs() -> None:
    program, ex = mlp_program()
    run = make_executor(program, "forward")
    for _ in range(2):
        x = torch.randn(2, 4)
        (out,) = run([x, ex["w"], ex["b"]])
        torch.testing.assert_close(out, torch.relu(x @ ex["w"].T + ex["b"]) * 2)


def test_compiled_dialect_without_loader_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib
    import types

    program, _ = mlp_program()
    program.dialect = "compiled"
    empty = types.ModuleType("ember.runtime.compiled")
    monkeypatch.setattr(importlib, "import_module", lambda name: empty)
    with pytest.raises(RuntimeError, match="cannot run 'compiled' programs"):
        make_executor(program, "forward")


def test_compiled_dialect_delegates_to_the_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import types

    program, _ = mlp_program()
    program.dialect = "compiled"
    calls: list[tuple[Program, str]] = []
    fake = types.ModuleType("ember.runtime.compiled")
    fake.load_executor = lambda p, g: calls.append((p, g)) or (lambda xs: [len(xs)])  # type: ignore[attr-defined]
    monkeypatch.setattr(importlib, "import_module", lambda name: fake)
    run = make_executor(program, "forward")
    assert calls == [(program, "forward")]
    assert run([1, 2, 3]) == [3]


def test_unknown_dialect_is_rejected() -> None:
    program = Program(dialect="mystery")
    with pytest.raises(ValueError, match="mystery"):
        make_executor(program, "forward")


# -- programs recorded by ember.runtime.tracing: verified, then interpreted --------------


def _attention_block(x: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
    h = torch.nn.functional.layer_norm(x, (8,))
    q = torch.nn.functional.linear(h, w)
    attn = torch.softmax(q @ q.transpose(-1, -2) / 8**0.5, dim=-1)
    return [torch.nn.functional.gelu(attn @ h)]


def _views_and_splits(x: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
    a, b = x.reshape(4, 2, 4).split(2, dim=-1)
    values, indices = torch.max(a * b.sin(), dim=1)
    return [torch.cat([values, b.sum(1)], dim=0), indices]


def _in_place(x: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
    y = x.clone()
    y.mul_(2).add_(w[0])
    y[:, 0] = 0.5
    return [y.relu_()]


@pytest.mark.parametrize("fn", [_attention_block, _views_and_splits, _in_place])
def test_recorded_programs_verify_and_match_eager(fn) -> None:  # type: ignore[no-untyped-def]
    from ember.runtime.ir import InputSpec, verify
    from ember.runtime.tracing import GraphRecorder

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    rec = GraphRecorder()
    fx, fw = rec.add_input(x, InputSpec("x")), rec.add_input(w, InputSpec("w"))
    with rec:
        outs = fn(fx, fw)
    program = rec.finish(outs)
    verify(program, "aten")
    x2, w2 = torch.randn(4, 8), torch.randn(8, 8)
    got = run_program(program, [x2, w2])
    expected = fn(x2, w2)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)


# -- symbolic graphs: symbols bound from the inputs, SymExpr arguments, unbacked sizes ---


def _meta(dtype: torch.dtype, sizes: tuple[object, ...],
          strides: tuple[object, ...]) -> TensorMeta:
    return TensorMeta(dtype, sizes, strides, torch.device("cpu"))  # type: ignore[arg-type]


def _symbolic_program() -> Program:
    """``x.view(s0*4).sum(0) * y`` for ``x: f32[s0, 4]``, ``y: f32[s1]`` with s0 in
    [2, 16], s1 in [2, inf] and the guard ``s0%2 == 0`` (from model.py:7)."""
    f32 = torch.float32
    nodes = [
        Node("x", "placeholder", "x", meta=_meta(f32, ("s0", 4), (4, 1))),
        Node("y", "placeholder", "y", meta=_meta(f32, ("s1",), (1,))),
        Node("flat", "call", "aten::view.default", (ValueRef("x"), (SymExpr("4*s0"),)),
             meta=_meta(f32, ("4*s0",), (1,))),
        Node("total", "call", "aten::sum.dim_IntList", (ValueRef("flat"), (0,)),
             meta=_meta(f32, (), ())),
        Node("out", "call", "aten::mul.Tensor", (ValueRef("total"), ValueRef("y")),
             meta=_meta(f32, ("s1",), (1,))),
        Node("output", "output", "output", ((ValueRef("out"),),)),
    ]
    guard = ShapeGuard("s0%2 == 0", SourceLocation("model.py", 7, "forward", "x.view(-1)"))
    graph = Graph(nodes, {"s0": SymbolRange(2, 16, hint=4), "s1": SymbolRange(2, None, 3)},
                  [guard])
    return Program(graphs={"forward": graph},
                   signature=Signature(inputs={"forward": [InputSpec("x"), InputSpec("y")]},
                                       outputs={"forward": [OutputSpec()]}))


def test_symbolic_graph_runs_for_every_size_in_its_ranges() -> None:
    interpreter = Interpreter(_symbolic_program())
    for n, m in ((2, 2), (8, 5), (16, 9)):
        x, y = torch.randn(n, 4), torch.randn(m)
        (out,) = interpreter.run(x, y)
        torch.testing.assert_close(out, x.reshape(-1).sum(0) * y)
        assert interpreter.symbols == {"s0": n, "s1": m}


@pytest.mark.parametrize(("x", "y", "message"), [
    ((18, 4), (3,), "input 'x' dim 0: size 18 is outside the range [2, 16] of symbol s0"),
    ((4, 4), (1,), "input 'y' dim 0: size 1 is outside the range [2, inf] of symbol s1"),
    ((4, 5), (3,), "input 'x' dim 1: size 5, expected 4"),
    ((7, 4), (3,), ("guard 's0%2 == 0' fails for s0=7 from input 'x' dim 0; it comes from "
                   "model.py:7 in forward: 'x.view(-1)'")),
])
def test_symbolic_graph_rejects_sizes_outside_its_ranges_and_guards(
        x: tuple[int, ...], y: tuple[int, ...], message: str) -> None:
    with pytest.raises(ShapeError) as raised:
        run_program(_symbolic_program(), [torch.randn(x), torch.randn(y)])
    assert str(raised.value) == message


def _unbacked_program(upper: int) -> Program:
    """``nonzero(x)`` (u0 rows, u0 in [0, upper]) and ``new_zeros(x, (u0 + 1,))``."""
    nodes = [
        Node("x", "placeholder", "x", meta=_meta(torch.float32, ("s0",), (1,))),
        Node("nz", "call", "aten::nonzero.default", (ValueRef("x"),),
             meta=_meta(torch.int64, ("u0", 1), (1, 1))),
        Node("ones", "call", "aten::new_ones.default", (ValueRef("x"), (SymExpr("u0+1"),)),
             meta=_meta(torch.float32, ("u0+1",), (1,))),
        Node("output", "output", "output", ((ValueRef("nz"), ValueRef("ones")),)),
    ]
    graph = Graph(nodes, {"s0": SymbolRange(2, None, hint=5),
                          "u0": SymbolRange(0, upper)})
    return Program(graphs={"forward": graph},
                   signature=Signature(inputs={"forward": [InputSpec("x")]},
                                       outputs={"forward": [OutputSpec(), OutputSpec()]}))


def test_unbacked_symbols_bind_from_the_result_that_defines_them() -> None:
    x = torch.tensor([0.0, 1.0, 0.0, 2.0, 3.0])
    nz, ones = run_program(_unbacked_program(8), [x])
    torch.testing.assert_close(nz, torch.nonzero(x))
    torch.testing.assert_close(ones, torch.ones(4))
    with pytest.raises(ShapeError, match=r"^the result of 'nz' dim 0: size 3 is outside "
                                         r"the range \[0, 2\] of symbol u0$"):
        run_program(_unbacked_program(2), [x])


def test_recorded_unbacked_sizes_run_for_other_data() -> None:
    """A dynamic recording of ``nonzero`` (``u0`` rows) and a size computed from it: the
    interpreter binds ``u0`` from the ``nonzero`` result of each run."""
    from ember.runtime.ir import InputSpec, verify
    from ember.runtime.tracing import GraphRecorder

    def fn(y: torch.Tensor) -> list[torch.Tensor]:
        nz = torch.nonzero(y > 0)
        return [nz.sum(1), y.new_ones(nz.shape[0] + 1)]

    rec = GraphRecorder(dynamic=True)
    fake = rec.add_input(torch.randn(6, 2), InputSpec("y"), dynamic_dims={0: (2, None)})
    with rec:
        outs = fn(fake)
    program = rec.finish(outs)
    verify(program, "aten")
    assert "[sym(u0+1)]" in print_program(program)
    for y in (torch.randn(5, 2), -torch.ones(3, 2), torch.ones(9, 2)):
        got, expected = run_program(program, [y]), fn(y)
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e)
