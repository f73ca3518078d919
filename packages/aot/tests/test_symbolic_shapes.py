"""The aot stage on symbolic shapes (issue 15): programs captured with a symbolic dim
compile once and give eager's values and gradients at two sizes; saved bytes are
expressions; the backward binds its symbols; guards are carried over; what cannot be
done symbolically is refused with a message naming it. The printed forward/backward
graphs are golden texts in ``test_partition_text.py`` (``dynamic_*``)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from aot_capture import DynamicDims, capture, compile_module
from ember.aot.__main__ import main
from ember.aot.pipeline import aot_compile
from ember.aot.symbolic_decompositions import batch_norm_backward, batch_norm_training
from ember.runtime.callable import ProgramCallable
from ember.runtime.ir import (
    Graph,
    InputSpec,
    IRFormatError,
    Node,
    OutputKind,
    Program,
    Signature,
    SourceLocation,
    SymbolRange,
    TensorMeta,
    ValueRef,
    load,
    print_graph,
    save,
    verify,
)
from ember.runtime.ir.contracts import AotMetadata
from ember.runtime.ir.graph import ShapeGuard, SymExpr
from ember.runtime.stages import StageDeclined, SymbolicSizesDeclined
from ember_testing.training import MODELS, assert_same_training_state, sgd_step

ROWS = {0: {0: (2, None)}}


def _mlp(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
         b2: torch.Tensor) -> torch.Tensor:
    return F.linear(F.linear(x, w1, b1).tanh(), w2, b2)


def _mlp_inputs(n: int) -> list[torch.Tensor]:
    return [torch.randn(n, 4), torch.randn(3, 4, requires_grad=True),
            torch.randn(3, requires_grad=True), torch.randn(2, 3, requires_grad=True),
            torch.randn(2, requires_grad=True)]


def _grad(n: int, *shape: int) -> torch.Tensor:
    return torch.randn(n, *shape, requires_grad=True)


# name, function, inputs at a size, the symbolic dims
CASES: list[tuple[str, Callable[..., torch.Tensor], Callable[[int], list[torch.Tensor]],
                  DynamicDims]] = [
    ("mlp", _mlp, _mlp_inputs, ROWS),
    ("softmax", lambda x, w: (x.softmax(-1) * w).sum(),
     lambda n: [_grad(n, 8), torch.randn(8, requires_grad=True)], ROWS),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, [8], w, b).tanh(),
     lambda n: [_grad(n, 8), torch.randn(8, requires_grad=True),
                torch.randn(8, requires_grad=True)], ROWS),
    ("cat", lambda x, y: torch.cat([x, y]) * 2, lambda n: [_grad(n, 4), _grad(n + 2, 4)],
     {0: {0: (2, None)}, 1: {0: (2, None)}}),
    ("sum", lambda x: (x * 2).sum(), lambda n: [_grad(n, 4)], ROWS),
    ("flatten", lambda x: x.view(-1) * 3, lambda n: [_grad(n, 4)], ROWS),
    # a data-dependent (unbacked) output size: the tangent takes it from the output
    ("masked", lambda x: x[x > 0] * 2, lambda n: [torch.randn(n, requires_grad=True)], ROWS),
]


def _compile(fn: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor],
             dynamic: DynamicDims) -> Program:
    program = aot_compile(capture(fn, *inputs, dynamic=dynamic))
    verify(program, "core-functional")
    return program


@pytest.mark.parametrize("name,fn,make_inputs,dynamic", CASES, ids=[c[0] for c in CASES])
def test_one_compile_gives_eager_values_and_gradients_at_two_sizes(
        name: str, fn: Callable[..., torch.Tensor],
        make_inputs: Callable[[int], list[torch.Tensor]], dynamic: DynamicDims) -> None:
    torch.manual_seed(0)
    program = _compile(fn, make_inputs(5), dynamic)
    assert set(program.graphs) == {"forward", "backward"}
    assert program.forward.symbols and program.graphs["backward"].symbols
    run = ProgramCallable(program)
    for n in (3, 11):
        inputs = make_inputs(n)
        wrt = [t for t in inputs if t.requires_grad]
        expected = fn(*inputs)
        (actual,) = run(list(inputs))
        torch.testing.assert_close(actual, expected)
        tangent = torch.randn_like(expected)
        torch.testing.assert_close(torch.autograd.grad(actual, wrt, tangent),
                                   torch.autograd.grad(expected, wrt, tangent))


# model, input at a size, the symbolic input dims
MODEL_CASES: list[tuple[str, Callable[[int], torch.Tensor], dict[int, tuple[int, None]]]] = [
    ("mlp", lambda n: torch.randn(n, 16), {0: (2, None)}),
    ("conv_bn", lambda n: torch.randn(n, 3, 8, 8), {0: (2, None)}),
    ("transformer_block", lambda n: torch.randn(2, n, 32), {1: (2, None)}),
]


@pytest.mark.parametrize("name,make_input,dims", MODEL_CASES, ids=[m[0] for m in MODEL_CASES])
def test_one_optimizer_step_at_two_sizes_after_one_compile(
        name: str, make_input: Callable[[int], torch.Tensor],
        dims: dict[int, tuple[int, None]]) -> None:
    torch.manual_seed(0)
    make_model = {m[0]: m[1] for m in MODELS}[name]
    eager = make_model().train()
    compiled = copy.deepcopy(eager)
    program, run = compile_module(compiled, make_input(5), dynamic={0: dims})
    assert program.forward.symbols
    for n in (3, 7):
        x = make_input(n)
        target = torch.randn_like(eager(x.clone()).detach())
        compiled.load_state_dict(eager.state_dict())  # the probe moved BatchNorm stats
        sgd_step(eager, eager, x, target)
        sgd_step(compiled, lambda inp: run(inp)[0], x, target)
        assert_same_training_state(eager, compiled)


def test_batch_norm_training_decomposes_without_a_symbolic_float() -> None:
    # torch's decompositions scale by n/(n-1) and 1/n, symbolic floats the IR cannot
    # hold; Ember's take var(correction=1) and means (symbolic_decompositions.py), so
    # batch norm and its backward are Core ATen and nothing stays whole
    model = {m[0]: m[1] for m in MODELS}["conv_bn"]().train()
    program, _ = compile_module(model, torch.randn(5, 3, 8, 8), dynamic={0: {0: (2, None)}})
    targets = {n.target for g in program.graphs.values() for n in g.nodes}
    assert not {t for t in targets if "batch_norm" in t}
    assert "aten::var.correction" in targets
    aot = AotMetadata.from_program(program)
    assert aot is not None and aot.extern_ops == ()


@pytest.mark.parametrize("make_model,features", [
    (lambda: torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8, affine=False)),
     (6,)),
    (lambda: torch.nn.Sequential(torch.nn.Conv1d(4, 8, 3), torch.nn.BatchNorm1d(8, momentum=0.3)),
     (4, 10)),
], ids=["no_affine", "conv1d"])
def test_batch_norm_training_over_a_symbolic_batch_matches_eager(
        make_model: Callable[[], torch.nn.Module], features: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    eager = make_model().train()
    compiled = copy.deepcopy(eager)
    program, run = compile_module(compiled, torch.randn(5, *features), dynamic={0: ROWS[0]})
    assert program.forward.symbols
    for n in (3, 7):
        x = torch.randn(n, *features)
        target = torch.randn_like(eager(x.clone()).detach())
        compiled.load_state_dict(eager.state_dict())  # the probe moved the running stats
        sgd_step(eager, eager, x, target)
        sgd_step(compiled, lambda inp: run(inp)[0], x, target)
        assert_same_training_state(eager, compiled)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_batch_norm_decompositions_give_atens_dtypes_and_values(dtype: torch.dtype) -> None:
    aten = torch.ops.aten
    x, g = torch.randn(6, 4, 5, 5, dtype=dtype), torch.randn(6, 4, 5, 5, dtype=dtype)
    w, b, mean = torch.rand(4, dtype=dtype) + 0.5, torch.randn(4, dtype=dtype), torch.randn(4)
    mean, var = mean.to(dtype), (torch.rand(4) + 0.5).to(dtype)
    expected = aten._native_batch_norm_legit_functional.default(x, w, b, mean, var, True,
                                                                  0.1, 1e-5)
    actual = batch_norm_training(None, x, w, b, mean, var, True, 0.1, 1e-5)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol)  # dtypes too
    args = (x, w, mean, var, expected[1], expected[2], True, 1e-5, [True, True, True])
    torch.testing.assert_close(batch_norm_backward(None, g, *args),
                               aten.native_batch_norm_backward.default(g, *args),
                               rtol=tol, atol=tol)


def test_saved_bytes_are_an_expression_and_the_cut_uses_the_hint() -> None:
    program = _compile(_mlp, _mlp_inputs(5), ROWS)
    aot = AotMetadata.from_program(program)
    assert aot is not None and aot.partition is not None
    # x [s0, 4] and addmm [s0, 3] in float32, and w2 [2, 3]
    assert aot.partition.saved_bytes == "28*s0+24"


def test_the_cut_compares_symbolic_sizes_at_the_hint() -> None:
    # softmax reduces s0*8 elements: recomputed in the backward while that is under
    # aot.recompute_reduction_limit (4096) at the hint, saved above it
    def summary(rows: int) -> tuple[object, tuple[str, ...]]:
        program = _compile(lambda x, w: (x.softmax(-1) * w).sum(),
                           [_grad(rows, 8), torch.randn(8, requires_grad=True)], ROWS)
        aot = AotMetadata.from_program(program)
        assert aot is not None and aot.partition is not None
        return aot.partition.saved_bytes, aot.partition.recomputed

    assert summary(5) == ("32*s0+32", ("_softmax", "alias", "alias_1"))
    # the softmax itself is saved instead of its input: as many bytes
    assert summary(1000) == ("32*s0+32", ("alias", "alias_1"))


def test_the_backward_binds_its_symbols_from_a_size_carrier() -> None:
    program = _compile(lambda x: (x * 2).sum(), [_grad(6, 4)], ROWS)
    backward = program.graphs["backward"]
    carrier = backward.placeholders[0]
    assert (carrier.name, carrier.meta) == (
        "saved_sizes_for_backward",
        TensorMeta(torch.uint8, ("s0", 0), (1, 1), torch.device("cpu")))
    assert program.signature.outputs["forward"][-1].kind == OutputKind.SAVED_TENSOR
    aot = AotMetadata.from_program(program)
    assert aot is not None and aot.partition is not None and aot.partition.saved_bytes == 0


def _mutate_and_view_tail(x: torch.Tensor) -> torch.Tensor:
    x[1:].mul_(2)
    return x[x.shape[0] // 2:]


def _write_through_select(x: torch.Tensor) -> torch.Tensor:
    x[:, 0].add_(1)
    return x.t()


def _zero_second_chunk(x: torch.Tensor) -> torch.Tensor:
    x.chunk(2)[1].zero_()
    return x * 1


def _scale_diagonal(x: torch.Tensor) -> torch.Tensor:
    x.diagonal().mul_(2)
    return x.sum(0)


def _write_through_flat_view(x: torch.Tensor) -> torch.Tensor:
    y = x.view(-1)
    y.add_(1)
    return y


SQUARE = {0: {0: (2, None), 1: (2, None)}}

# name, function, the symbolic dims, whether the output is a view of the input
MUTATIONS: list[tuple[Callable[[torch.Tensor], torch.Tensor], DynamicDims, bool]] = [
    (_mutate_and_view_tail, ROWS, True),
    (_write_through_select, ROWS, True),
    (_zero_second_chunk, ROWS, False),
    (_scale_diagonal, SQUARE, False),
    (_write_through_flat_view, ROWS, True),
]

VIEW_AND_MUTATION = """\
graph forward(%in0: f32[s0, 4]{4,1} cpu):
  symbols s0 in [2, inf] hint=6
  guard s0-1 != 1
  %slice: f32[s0-1, 4]{4,1} cpu offset=4 = aten::slice.Tensor(%in0, 0, 1, 9223372036854775807)
  %mul: f32[s0-1, 4]{4,1} cpu = aten::mul.Tensor(%slice, 2)
  %slice_scatter: f32[s0, 4]{4,1} cpu = aten::slice_scatter.default(%in0, %mul, 0, 1, 9223372036854775807)
  %slice_1: f32[s0-s0//2, 4]{4,1} cpu offset="4*(s0//2)" = aten::slice.Tensor(%slice_scatter, 0, sym(s0//2), 9223372036854775807)
  return (%slice_1, %slice_scatter)  [aliased_output in0, mutated_input in0]
"""


def test_a_write_through_a_view_and_a_returned_view_read_as_text() -> None:
    program = aot_compile(capture(_mutate_and_view_tail, torch.randn(6, 4), dynamic=ROWS))
    graph = program.forward
    graph.nodes = [dataclasses.replace(n, source=None) for n in graph.nodes]
    graph.guards = [dataclasses.replace(g, source=None) for g in graph.guards]
    assert print_graph(graph, "forward", program.signature.inputs["forward"],
                       program.signature.outputs["forward"]) == VIEW_AND_MUTATION
    aot = AotMetadata.from_program(program)
    assert aot is not None
    (alias,) = aot.aliased_outputs
    assert (alias.sizes, alias.strides, alias.storage_offset) == (("s0-s0//2", 4), (4, 1),
                                                                  "4*(s0//2)")


@pytest.mark.parametrize("fn,dynamic,is_view", MUTATIONS, ids=[m[0].__name__ for m in MUTATIONS])
def test_mutations_and_views_match_eager_at_two_sizes(
        fn: Callable[[torch.Tensor], torch.Tensor], dynamic: DynamicDims,
        is_view: bool) -> None:
    program = aot_compile(capture(fn, torch.randn(6, 6 if dynamic is SQUARE else 4),
                                  dynamic=dynamic))
    verify(program, "core-functional")
    run = ProgramCallable(program)
    for n in (5, 9):
        x = torch.randn(n, n if dynamic is SQUARE else 4)
        ours = x.clone()
        expected = fn(x)
        (actual,) = run([ours])
        torch.testing.assert_close(actual, expected)
        torch.testing.assert_close(ours, x)  # the write is copied back
        shares = actual.untyped_storage().data_ptr() == ours.untyped_storage().data_ptr()
        assert shares == is_view


def test_an_output_that_views_another_output_at_two_sizes() -> None:
    def scaled_and_tail(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        return y, y[x.shape[0] // 2:].t()

    run = ProgramCallable(aot_compile(capture(scaled_and_tail, torch.randn(6, 4),
                                              dynamic=ROWS)))
    for n in (6, 9):
        x = torch.randn(n, 4)
        scaled, tail = run([x])
        torch.testing.assert_close((scaled, tail), scaled_and_tail(x))
        assert tail.untyped_storage().data_ptr() == scaled.untyped_storage().data_ptr()
        assert (tail.stride(), tail.storage_offset()) == ((1, 4), 4 * (n // 2))


def _hand_built(target: str, args: tuple[object, ...], out_sizes: tuple[int | str, ...],
                guards: list[ShapeGuard] | None = None) -> Program:
    """``target(%x, *args)`` on an input ``x: f32[s0, 4]``."""
    cpu = torch.device("cpu")
    x = TensorMeta(torch.float32, ("s0", 4), (4, 1), cpu)
    strides = tuple(4 if i == 0 and len(out_sizes) == 2 else 1 for i in range(len(out_sizes)))
    out = TensorMeta(torch.float32, out_sizes, strides, cpu)
    graph = Graph([Node("x", "placeholder", "x", meta=x),
                   Node("y", "call", target, (ValueRef("x"), *args), meta=out),  # type: ignore[arg-type]
                   Node("output", "output", "output", ((ValueRef("y"),),))],
                  symbols={"s0": SymbolRange(2, 64, hint=8)}, guards=list(guards or []))
    return Program(graphs={"forward": graph},
                   signature=Signature(inputs={"forward": [InputSpec("x")]}))


def test_guards_are_carried_over() -> None:
    guard = ShapeGuard("s0%2 == 0")
    program = aot_compile(_hand_built("aten::mul.Tensor", (2,), ("s0", 4), [guard]))
    assert program.forward.guards == [guard]
    assert program.forward.symbols == {"s0": SymbolRange(2, 64, hint=8)}


def test_guards_the_stage_adds_come_after_the_inputs_with_their_line() -> None:
    line = SourceLocation("model.py", 7, "forward", "x.view(-1, 8)")
    program = _hand_built("aten::view.default", ((SymExpr("s0//2"), 8),), ("s0//2", 8),
                          [ShapeGuard("s0 <= 32")])
    program.forward.nodes[1].source = line
    guards = aot_compile(program).forward.guards
    # the view needs an even s0: [s0//2, 8] holds as many elements as [s0, 4]
    assert guards[:2] == [ShapeGuard("s0 <= 32"), ShapeGuard("s0%2 == 0", line)]


def _pool(x: torch.Tensor) -> torch.Tensor:
    return F.max_pool2d(x, 2)


def test_guards_the_backward_adds_name_the_line_whose_backward_runs() -> None:
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    program = aot_compile(capture(_pool, x, dynamic={0: {2: (2, None), 3: (2, None)}}))
    # the autograd engine checks the pooled gradient's sizes (not 1) between ops
    lines = {(g.expr, g.source.function if g.source else None)
             for g in program.forward.guards}
    assert lines == {("s0//2 != 1", "_pool"), ("s1//2 != 1", "_pool")}


def test_a_size_the_stage_would_specialise_is_refused() -> None:
    program = _hand_built("aten::view.default", ((32,),), (32,))
    with pytest.raises(StageDeclined, match="specialised size 's0' of input 'x' .dim 0. to 8"):
        aot_compile(program)


def test_a_decline_for_symbolic_sizes_says_so() -> None:
    """A frontend that made the sizes symbolic itself may capture again with static
    ones (``SymbolicSizesDeclined``); other declines are plain ``StageDeclined``."""
    program = _hand_built("aten::view.default", ((32,),), (32,))
    with pytest.raises(SymbolicSizesDeclined):
        aot_compile(program)


def test_resize_of_a_symbolic_tensor_is_refused() -> None:
    def grow(x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y.resize_(2 * x.shape[0], 4)
        return y

    with pytest.raises(IRFormatError, match="resize_ of a tensor with symbolic sizes"):
        aot_compile(capture(grow, torch.randn(5, 4), dynamic=ROWS))


def test_an_op_that_needs_a_data_dependent_size_declines_naming_it() -> None:
    program = capture(lambda x: x.nonzero(), torch.randn(6), dynamic={0: {0: (2, None)}})
    graph = program.forward
    # split into pieces of u0 (the number of nonzeros): how many pieces depends on data
    piece = TensorMeta(torch.float32, (), (), torch.device("cpu"))
    graph.nodes.insert(-1, Node("split", "call", "aten::split.Tensor",
                                (ValueRef("in0"), SymExpr("u0")), meta=(piece,)))
    graph.output.args = ((ValueRef("split", 0),),)
    with pytest.raises(StageDeclined, match=r"for every size its symbols allow: graph "
                       r"'forward', node %split = aten::split.Tensor failed: "
                       r"GuardOnDataDependentSymNode: .*data-dependent expression \(\(u0 \+ 5\)//u0\)$"):
        aot_compile(program)


def test_a_symbolic_ember_file_through_the_command_line(tmp_path: Path) -> None:
    source, target = tmp_path / "in.ember", tmp_path / "out.ember"
    save(capture(lambda x: (x * 2).sum(), _grad(6, 4), dynamic={0: {0: (2, 64)}}), source)
    assert main([str(source), "-o", str(target)]) == 0
    program = load(target)
    assert program.forward.symbols == {"s0": SymbolRange(2, 64, hint=6)}
    assert [p.name for p in program.graphs["backward"].placeholders] == [
        "saved_sizes_for_backward", "tangent_0"]
    run = ProgramCallable(program)
    x = _grad(10, 4)
    run([x])[0].backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
