"""``ember.runtime.import_fx``: FX GraphModules (torch-level and aten-level) recorded to
``aten`` programs; attribute tensors as PARAMETER/BUFFER/CONSTANT inputs, nested outputs,
fake example inputs, symbolic graphs (``make_fx`` symbolic tracing, Dynamo-style size
inputs). Also: the Dynamo backend module stands without ``ember.frontend`` and names a
missing stage."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import pytest
import torch
from ember.runtime import import_fx, stages
from ember.runtime.dynamo_backend import ember
from ember.runtime.foreign_shapes import SymbolicImportError
from ember.runtime.fx_import import record_fx
from ember.runtime.interpreter import run_program
from ember.runtime.ir import InputKind, InputSpec, Program, verify
from ember.runtime.ir.printer import print_graph, print_program
from ember.runtime.ir.symbolic import ShapeError
from ember.runtime.stages import StageNotInstalledError
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv


class WithState(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x: torch.Tensor) -> Any:
        y = self.lin(x) * self.scale
        return y, [y.relu(), {"none": None, "three": 3}]


def _with_constant() -> torch.fx.GraphModule:
    """A GraphModule whose ``get_attr`` reads a parameter, a buffer and a plain tensor."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    w = graph.get_attr("weight")
    s = graph.get_attr("shift")
    c = graph.get_attr("offset")
    y = graph.call_function(torch.matmul, (x, w))
    z = graph.call_function(torch.add, (y, s))
    graph.output(graph.call_function(torch.sub, (z, c)))
    gm = torch.fx.GraphModule({"weight": torch.nn.Parameter(torch.randn(3, 3)),
                               "shift": torch.randn(3), "offset": torch.randn(3)}, graph)
    # GraphModule registers tensors as buffers; make "offset" a plain attribute
    delattr(gm, "offset")
    gm.offset = torch.full((3,), 0.5)
    assert "offset" not in dict(gm.named_buffers())
    return gm


def test_get_attr_tensors_become_parameter_buffer_and_constant_inputs() -> None:
    gm = _with_constant()
    x = torch.randn(2, 3)
    program = import_fx(gm, [x])
    assert program.dialect == "aten"
    assert program.signature.inputs["forward"] == [
        InputSpec("x"),
        InputSpec("p_weight", InputKind.PARAMETER, "weight"),
        InputSpec("b_shift", InputKind.BUFFER, "shift"),
        InputSpec("c_offset", InputKind.CONSTANT, "offset"),
    ]
    assert sorted(program.tensors) == ["offset", "shift", "weight"]
    assert [p.name for p in program.forward.placeholders] == [
        "x", "p_weight", "b_shift", "c_offset"]
    # only the user input given: the attribute inputs come from program.tensors
    (got,) = run_program(program, [x])
    torch.testing.assert_close(got, gm(x))


def test_submodule_parameters_and_nested_outputs() -> None:
    gm = torch.fx.symbolic_trace(WithState())
    x = torch.randn(4, 3)
    imported = record_fx(gm, [x])
    specs = imported.program.signature.inputs["forward"]
    assert [(s.name, s.kind, s.target) for s in specs] == [
        ("x", InputKind.USER_INPUT, None),
        ("p_lin_weight", InputKind.PARAMETER, "lin.weight"),
        ("p_lin_bias", InputKind.PARAMETER, "lin.bias"),
        ("b_scale", InputKind.BUFFER, "scale"),
    ]
    assert imported.attributes[0] is dict(gm.named_parameters())["lin.weight"]  # live
    # nested outputs: the tensor leaves in pytree order are the program's outputs
    assert len(imported.program.forward.output_values) == 2
    flat = run_program(imported.program, [x])
    rebuilt = imported.rebuild(flat)
    expected = gm(x)
    torch.testing.assert_close(rebuilt[0], expected[0])
    torch.testing.assert_close(rebuilt[1][0], expected[1][0])
    assert rebuilt[1][1] == {"none": None, "three": 3}
    assert type(rebuilt[1]) is list


def test_aten_level_graph() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.sin(x @ w)

    x, w = torch.randn(2, 3), torch.randn(3, 4)
    gm = make_fx(fn)(x, w)
    program = import_fx(gm, [x, w])
    targets = [n.target for n in program.forward.nodes if n.op == "call"]
    assert targets == ["aten::mm.default", "aten::sin.default"]
    torch.testing.assert_close(run_program(program, [x, w])[0], fn(x, w))


def test_fake_example_inputs_give_the_program_of_real_ones() -> None:
    gm = torch.fx.symbolic_trace(WithState())
    real = torch.randn(4, 3, requires_grad=True)
    with FakeTensorMode():
        fake = torch.empty(4, 3, requires_grad=True)
    from_real = import_fx(gm, [real])
    from_fake = import_fx(gm, [fake])
    verify(from_fake, "aten")
    assert print_program(from_fake) == print_program(from_real)
    assert from_fake.forward.placeholders[0].meta.requires_grad  # type: ignore[union-attr]


def _without_sources(program: Program) -> str:
    """The forward graph's text form without source lines (they name generated code)."""
    graph = program.forward
    nodes = [dataclasses.replace(n, source=None) for n in graph.nodes]
    return print_graph(dataclasses.replace(graph, nodes=nodes), "forward",
                       program.signature.inputs["forward"], program.signature.outputs["forward"])


def _size_then_tensor(size_of: str = "x") -> tuple[torch.fx.GraphModule, torch.SymInt]:
    """``f(n, x) = x.new_ones([n, 2])`` as a Dynamo-style graph: ``n`` is a SymInt
    placeholder, ``x`` a fake of ``make_fx``'s symbolic ShapeEnv (size (s0, 4)); ``n`` is
    ``x.size(0)``, or with ``size_of="other"`` a symbol of no tensor input."""
    traced = make_fx(lambda x: x * 2, tracing_mode="symbolic")(torch.randn(3, 4))
    fake = next(n for n in traced.graph.nodes if n.op == "placeholder").meta["val"]
    size = fake.shape[0]
    if size_of == "other":
        size = fake.fake_mode.shape_env.create_unbacked_symint()
    graph = torch.fx.Graph()
    n = graph.placeholder("n")
    n.meta["example_value"] = size
    x = graph.placeholder("x")
    x.meta["example_value"] = fake
    graph.output(graph.call_function(torch.ops.aten.new_ones.default, (x, [n, 2])))
    return torch.fx.GraphModule({}, graph), size


def test_make_fx_symbolic_graphs_import_as_symbolic_programs() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0] * 4).sum(0, keepdim=True) * (x.shape[1] // 2) + x.shape[0]

    gm = make_fx(f, tracing_mode="symbolic")(torch.randn(3, 4))
    program = import_fx(gm, [torch.randn(3, 4)])
    verify(program, "aten")
    assert _without_sources(program) == """\
graph forward(%x_1: f32[s0, 4]{4,1} cpu):
  symbols s0 in [2, inf] hint=3
  %view: f32[4*s0]{1} cpu = aten::view.default(%x_1, [sym(4*s0)])
  %sum: f32[1]{1} cpu = aten::sum.dim_IntList(%view, [0], True)
  %mul: f32[1]{1} cpu = aten::mul.Tensor(%sum, 2)
  %add: f32[1]{1} cpu = aten::add.Tensor(%mul, sym(s0))
  return (%add)  [user_output]
"""
    for n in (2, 3, 9):
        x = torch.randn(n, 4)
        torch.testing.assert_close(run_program(program, [x])[0], f(x))


def test_size_inputs_get_no_placeholder_and_are_checked() -> None:
    gm, _ = _size_then_tensor()
    imported = record_fx(gm, [3, torch.randn(3, 4)])
    program = imported.program
    assert [p.name for p in program.forward.placeholders] == ["x"]
    assert "aten::new_ones.default(%x, [sym(s0), 2])" in print_program(program)
    (size,) = imported.size_inputs
    assert (size.position, size.name, size.expr) == (0, "n", "s0")
    x = torch.randn(5, 4)
    inputs = imported.program_inputs([5, x])
    assert len(inputs) == 1 and inputs[0] is x
    torch.testing.assert_close(run_program(program, inputs)[0], torch.ones(5, 2))
    with pytest.raises(ShapeError, match=r"^graph input 'n' is 4, but it stands for the "
                                         r"size s0 = 5 \(dim 0 of input 1\)$"):
        imported.program_inputs([4, x])


def test_a_symbolic_number_that_is_no_tensor_size_is_refused() -> None:
    gm, size = _size_then_tensor("other")
    with pytest.raises(SymbolicImportError,
                       match=rf"graph input 'n' is the symbolic value {size}, and {size} is "
                             "no size of a tensor input"):
        import_fx(gm, [3, torch.randn(3, 4)])
    scalar = make_fx(lambda x: x * 2)(torch.randn(3))
    with pytest.raises(SymbolicImportError, match=r"'x_1' is the symbolic value u0, and u0 "):
        import_fx(scalar, [ShapeEnv().create_unbacked_symint()])


def test_float_inputs_read_by_item_are_baked_and_checked() -> None:
    """Dynamo passes a float attribute (dropout's p) as a 0-dim tensor read by
    ``.item()`` under dynamic=True; the recorder's fakes hold no value, so it is baked."""
    graph = torch.fx.Graph()
    x, p = graph.placeholder("x"), graph.placeholder("p")
    item = graph.call_method("item", (p,))
    graph.output(graph.call_function(torch.mul, (x, item)))
    gm = torch.fx.GraphModule({}, graph)
    imported = record_fx(gm, [torch.randn(3), torch.tensor(0.5)])
    assert [(b.position, b.name, b.value) for b in imported.baked_scalars] == [(1, "p", 0.5)]
    assert [n.name for n in imported.program.forward.placeholders] == ["x"]
    assert "aten::mul.Tensor(%x, 0.5)" in print_program(imported.program)
    x = torch.randn(3)
    assert imported.program_inputs([x, torch.tensor(0.5)]) == [x]
    with pytest.raises(ValueError, match=r"^graph input 'p' was 0.5 when the graph was "
                                         r"compiled and is 0.25 now"):
        imported.program_inputs([x, torch.tensor(0.25)])


def test_bad_example_inputs() -> None:
    gm = make_fx(lambda x: x * 2)(torch.randn(3))
    with pytest.raises(ValueError, match="1 placeholders but 2 example inputs"):
        import_fx(gm, [torch.randn(3), torch.randn(3)])
    with pytest.raises(NotImplementedError, match="'x_1' is a float, not a tensor"):
        import_fx(gm, [2.0])


def test_backend_without_stages_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stages, "available_stages", dict)
    gm = make_fx(lambda x: x * 2)(torch.randn(3))
    with pytest.raises(StageNotInstalledError, match="pip install ember-aot"):
        ember(gm, [torch.randn(3)])


def test_backend_module_imports_no_frontend() -> None:
    code = ("import sys, ember.runtime.dynamo_backend\n"
            "bad = [m for m in sys.modules if m.startswith(('ember.frontend', 'ember.aot', "
            "'ember.inductor', 'torch._dynamo'))]\n"
            "assert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
