"""``ember.runtime.import_exported``: torch.export programs as ``aten`` Programs.

The tests run the imported program on the reference interpreter (through
``ProgramCallable``, which copies mutated inputs back) and compare with eager; the whole
stage path (aot and inductor command lines, ``load_artifact``) is
``integration_tests/test_export_path.py``.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.export
from ember.runtime import import_exported
from ember.runtime.callable import ProgramCallable
from ember.runtime.ir import InputKind, InputSpec, OutputKind, Program, print_program, verify
from ember.runtime.ir.printer import print_graph


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(torch.relu(self.fc1(x)))
        return out


class ConvBN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.relu(self.bn(self.conv(x)))
        return out


class Counter(torch.nn.Module):
    """A persistent buffer written in place, a non-persistent one read, a user input
    written in place, a lifted tensor constant and three outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("steps", torch.zeros(()))
        self.register_buffer("scale", torch.full((4,), 2.0), persistent=False)
        self.offset = torch.tensor([1.0, -1.0, 0.5, 0.25])  # a plain attribute: a constant

    def forward(self, x: torch.Tensor, acc: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self.steps.add_(1)  # type: ignore[operator]
        acc.add_(x.sum(0))
        y = x * self.scale + self.offset  # type: ignore[operator]
        return y, y.sum(), acc * 2


def imported(model: torch.nn.Module, *args: torch.Tensor) -> Program:
    return import_exported(torch.export.export(model, args))


def run(program: Program, *user_inputs: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad():
        return ProgramCallable(program)(list(user_inputs))


def specs(program: Program) -> list[tuple[str, InputKind, str | None]]:
    return [(s.name, s.kind, s.target) for s in program.signature.inputs["forward"]]


def test_mlp_signature_tensors_and_values() -> None:
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(5, 8)
    program = imported(model, x)
    verify(program, "aten")
    assert specs(program) == [
        ("p_fc1_weight", InputKind.PARAMETER, "fc1.weight"),
        ("p_fc1_bias", InputKind.PARAMETER, "fc1.bias"),
        ("p_fc2_weight", InputKind.PARAMETER, "fc2.weight"),
        ("p_fc2_bias", InputKind.PARAMETER, "fc2.bias"),
        ("x", InputKind.USER_INPUT, None),
    ]
    assert [s.kind for s in program.signature.outputs["forward"]] == [OutputKind.USER_OUTPUT]
    assert sorted(program.tensors) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    assert torch.equal(program.tensors["fc1.weight"], model.fc1.weight.detach())
    # linear is CompositeImplicit: recorded as the dispatcher runs it, as capture does
    calls = [n.target for n in program.forward.calls()]
    assert "aten::linear.default" not in calls and "aten::relu.default" in calls
    # source lines point at the user's model, not at torch
    relu = next(n for n in program.forward.calls() if n.target == "aten::relu.default")
    assert relu.source is not None and relu.source.file == __file__
    assert "torch.relu(self.fc1(x))" in relu.source.text
    assert "%p_fc1_weight: f32[16, 8]{8,1} cpu requires_grad [parameter fc1.weight]" \
        in print_program(program)
    x2 = torch.randn(5, 8)
    (out,) = run(program, x2)
    torch.testing.assert_close(out, model(x2))


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_conv_batchnorm(train: bool) -> None:
    torch.manual_seed(0)
    model = ConvBN().train(train)
    program = imported(copy.deepcopy(model), torch.randn(2, 3, 8, 8))
    assert [s[1] for s in specs(program)] == [InputKind.PARAMETER] * 4 + \
        [InputKind.BUFFER] * 3 + [InputKind.USER_INPUT]
    x = torch.randn(2, 3, 8, 8)
    before = program.tensors["bn.running_mean"].clone()
    for _ in range(2):  # the second call reads the statistics the first one wrote
        (out,) = run(program, x)
        with torch.no_grad():
            expected = model(x)
        torch.testing.assert_close(out, expected)
    for name, buffer in model.named_buffers():
        torch.testing.assert_close(program.tensors[name], buffer, msg=name)
    assert torch.equal(program.tensors["bn.running_mean"], before) is not train
    assert int(program.tensors["bn.num_batches_tracked"]) == (2 if train else 0)


def test_buffer_and_user_input_mutations_constants_and_outputs() -> None:
    model = Counter()
    program = imported(copy.deepcopy(model), torch.randn(3, 4), torch.zeros(4))
    assert specs(program) == [
        ("b_steps", InputKind.BUFFER, "steps"),
        ("b_scale", InputKind.BUFFER, "scale"),
        ("c_offset", InputKind.CONSTANT, "offset"),
        ("x", InputKind.USER_INPUT, None),
        ("acc", InputKind.USER_INPUT, None),
    ]
    assert torch.equal(program.tensors["scale"], model.get_buffer("scale"))  # ep.constants
    assert torch.equal(program.tensors["offset"], model.offset)
    assert len(program.signature.outputs["forward"]) == 3
    x, acc, acc_eager = torch.randn(3, 4), torch.ones(4), torch.ones(4)
    outs = run(program, x, acc)
    expected = model(x, acc_eager)
    assert len(outs) == 3
    for got, want in zip(outs, expected):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(acc, acc_eager)  # the user input was written
    assert float(program.tensors["steps"]) == 1.0 == float(model.get_buffer("steps"))


def test_functional_export_mutation_outputs_are_written_back() -> None:
    """After ``run_decompositions`` the export graph is functional: mutations are outputs
    labelled BUFFER_MUTATION / USER_INPUT_MUTATION, imported as writes of the inputs."""
    model = Counter()
    ep = torch.export.export(copy.deepcopy(model), (torch.randn(3, 4), torch.zeros(4)))
    ep = ep.run_decompositions()
    kinds = {s.kind.name for s in ep.graph_signature.output_specs}
    assert {"BUFFER_MUTATION", "USER_INPUT_MUTATION"} <= kinds
    program = import_exported(ep)
    copies = [n for n in program.forward.calls() if n.target == "aten::copy_.default"]
    assert sorted(n.args[0].node for n in copies) == ["acc", "b_steps"]  # type: ignore[union-attr]
    assert len(program.forward.output_values) == 3  # user outputs only
    x, acc, acc_eager = torch.randn(3, 4), torch.ones(4), torch.ones(4)
    outs = run(program, x, acc)
    for got, want in zip(outs, model(x, acc_eager)):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(acc, acc_eager)
    assert float(program.tensors["steps"]) == 1.0


def test_grad_mode_region_runs_under_its_mode() -> None:
    class Frozen(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                y = self.fc(x)
            out: torch.Tensor = self.fc(y) + y
            return out

    model = Frozen()
    ep = torch.export.export(model, (torch.randn(2, 4),))
    assert any(getattr(n.target, "__name__", "") == "wrap_with_set_grad_enabled"
               for n in ep.graph_module.graph.nodes)
    program = import_exported(ep)
    metas = [n.meta for n in program.forward.calls() if n.target == "aten::addmm.default"]
    assert [m.requires_grad for m in metas] == [False, True]  # type: ignore[union-attr]
    x = torch.randn(2, 4)
    torch.testing.assert_close(run(program, x)[0], model(x))


class Reshape(torch.nn.Module):
    """A linear layer, then a view whose size is computed from the input's."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.lin(x).view(x.shape[0] * 2, 2) + y.sum()


def test_dynamic_shapes_import_as_a_symbolic_program_with_the_dims_ranges() -> None:
    batch, n = torch.export.Dim("batch", min=2, max=64), torch.export.Dim("n", max=32)
    model = Reshape()
    ep = torch.export.export(model, (torch.randn(4, 8), torch.randn(6, 3)),
                             dynamic_shapes=({0: batch}, {0: n}))
    program = import_exported(ep)
    verify(program, "aten")
    graph = program.forward
    unsourced = dataclasses.replace(
        graph, nodes=[dataclasses.replace(n, source=None) for n in graph.nodes])
    assert print_graph(unsourced, "forward", program.signature.inputs["forward"]) == """\
graph forward(
    %p_lin_weight: f32[4, 8]{8,1} cpu requires_grad [parameter lin.weight],
    %p_lin_bias: f32[4]{1} cpu requires_grad [parameter lin.bias],
    %x: f32[s0, 8]{8,1} cpu,
    %y: f32[s1, 3]{3,1} cpu,
):
  symbols s0 in [2, 64] hint=4, s1 in [2, 32] hint=6
  %t: f32[8, 4]{1,8} cpu requires_grad = aten::t.default(%p_lin_weight)
  %addmm: f32[s0, 4]{4,1} cpu requires_grad = aten::addmm.default(%p_lin_bias, %x, %t)
  %view: f32[2*s0, 2]{2,1} cpu requires_grad = aten::view.default(%addmm, [sym(2*s0), 2])
  %sum: f32[]{} cpu = aten::sum.default(%y)
  %add: f32[2*s0, 2]{2,1} cpu requires_grad = aten::add.Tensor(%view, %sum)
  return (%add)
"""
    for b, m in ((2, 2), (64, 5)):
        x, y = torch.randn(b, 8), torch.randn(m, 3)
        torch.testing.assert_close(run(program, x, y)[0], model(x, y))
    with pytest.raises(ValueError, match=r"input 'x' dim 0: size 65 is outside the range "
                                         r"\[2, 64\] of symbol s0"):
        run(program, torch.randn(65, 8), torch.randn(3, 3))


def test_object_missing_fields_is_refused() -> None:
    ep = torch.export.export(MLP(), (torch.randn(4, 8),))
    partial = SimpleNamespace(graph_module=ep.graph_module, state_dict=ep.state_dict)
    with pytest.raises(TypeError, match=r"SimpleNamespace passed has no graph_signature, "
                                        r"constants$"):
        import_exported(partial)
    no_specs = SimpleNamespace(graph_module=ep.graph_module, state_dict={}, constants={},
                               graph_signature=SimpleNamespace(input_specs=[]))
    with pytest.raises(TypeError, match=r"has no graph_signature\.output_specs"):
        import_exported(no_specs)


class _Payload:
    """Unpickling this touches the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("as_str", [False, True], ids=["Path", "str"])
def test_a_pt2_path_is_never_loaded(tmp_path: Path, as_str: bool) -> None:
    marker = tmp_path / "unpickled"
    pt2 = tmp_path / "model.pt2"
    pt2.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(TypeError, match=r"never loads \.pt2 files \(their weights are pickled"):
        import_exported(str(pt2) if as_str else pt2)
    assert not marker.exists()


def test_unsupported_node_is_named() -> None:
    class Branchy(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = torch.cond(x.sum() > 0, lambda t: t + 1, lambda t: t - 1, (x,))
            return out

    ep = torch.export.export(Branchy(), (torch.randn(3),))
    with pytest.raises(NotImplementedError,
                       match=r"export node 'cond' \(call_function cond\).*test_import_exported"
                             r".*not an ATen operator overload"):
        import_exported(ep)


def test_non_tensor_inputs_and_outputs_are_the_exports_constants() -> None:
    """torch.export bakes non-tensor arguments and results into the graph: they are no
    placeholders and no outputs of the program."""

    class Scaled(torch.nn.Module):
        def forward(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, int, torch.Tensor]:
            return x * k, k + 1, x.sum()

    ep = torch.export.export(Scaled(), (torch.randn(3), 3))
    program = import_exported(ep)
    assert [p.name for p in program.forward.placeholders] == ["x"]
    assert len(program.signature.outputs["forward"]) == 2
    x = torch.randn(3)
    scaled, total = run(program, x)
    torch.testing.assert_close(scaled, x * 3)
    torch.testing.assert_close(total, x.sum())


def test_placeholder_names_are_kept_for_user_inputs() -> None:
    program = imported(Counter(), torch.randn(3, 4), torch.zeros(4))
    user = [s for s in program.signature.inputs["forward"] if s.kind is InputKind.USER_INPUT]
    assert user == [InputSpec("x"), InputSpec("acc")]


def test_user_input_written_with_a_value_that_requires_grad() -> None:
    """Export marks the written input's value as requiring grad; the import must not
    make the user input a leaf that requires grad (an in-place write would fail)."""

    class Accumulate(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
            y = self.fc(x)
            acc.add_(y.sum(0))
            out: torch.Tensor = y * 2
            return out

    model = Accumulate()
    program = imported(model, torch.randn(2, 4), torch.zeros(4))
    acc_meta = program.forward.node("acc").meta
    assert acc_meta.requires_grad is False  # type: ignore[union-attr]
    x, acc, acc_eager = torch.randn(2, 4), torch.ones(4), torch.ones(4)
    (out,) = run(program, x, acc)
    with torch.no_grad():
        expected = model(x, acc_eager)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(acc, acc_eager)
