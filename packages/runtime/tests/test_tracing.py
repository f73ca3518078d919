"""The dispatch-level recorder (ember.runtime.tracing)."""

from __future__ import annotations

import pytest
import torch
from ember.runtime.interpreter import run_program
from ember.runtime.ir import InputSpec, OutputKind, OutputSpec, ScalarMeta, TensorMeta, ValueRef
from ember.runtime.tracing import GraphRecorder, RecordingError


def record(fn, *inputs):  # type: ignore[no-untyped-def]
    rec = GraphRecorder()
    fakes = [rec.add_input(t, InputSpec(f"x{i}")) for i, t in enumerate(inputs)]
    with rec:
        out = fn(*fakes)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return rec.finish(outs)


def targets(program) -> list[str]:  # type: ignore[no-untyped-def]
    return [n.target for n in program.forward.nodes if n.op == "call"]


def test_simple_chain_names_targets_and_meta() -> None:
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    p = record(lambda a, b: torch.relu(a @ b), x, w)
    assert [n.name for n in p.forward.nodes] == ["x0", "x1", "mm", "relu", "output"]
    assert targets(p) == ["aten::mm.default", "aten::relu.default"]
    assert p.forward.node("mm").args == (ValueRef("x0"), ValueRef("x1"))
    assert p.forward.node("relu").meta == TensorMeta(torch.float32, (4, 3), (3, 1),
                                                     torch.device("cpu"))
    assert p.forward.output_values == (ValueRef("relu"),)
    assert p.dialect == "aten"
    assert torch.equal(run_program(p, [x, w])[0], torch.relu(x @ w))


def test_repeated_ops_get_numbered_names() -> None:
    p = record(lambda a: (a + 1) + 2 + 3, torch.randn(3))
    assert [n.name for n in p.forward.calls()] == ["add", "add_1", "add_2"]


def test_source_location_is_the_user_line() -> None:
    def f(a):  # type: ignore[no-untyped-def]
        return a.sin()  # the line we look for

    p = record(f, torch.randn(2))
    src = p.forward.node("sin").source
    assert src is not None and src.function == "f" and src.file == __file__
    assert src.text == "return a.sin()  # the line we look for"


def test_set_source_overrides_stack() -> None:
    from ember.runtime.ir import SourceLocation

    rec = GraphRecorder()
    x = rec.add_input(torch.randn(2), InputSpec("x"))
    loc = SourceLocation("model.py", 7, "forward")
    rec.set_source(loc)
    with rec:
        y = x.cos()
    p = rec.finish([y])
    assert p.forward.node("cos").source == loc


def test_several_results_use_indexed_refs() -> None:
    x = torch.randn(4, 5)
    p = record(lambda a: (a.max(dim=1)[1], a.split(2, dim=0)[1]), x)
    assert p.forward.output_values == (ValueRef("max", 1), ValueRef("split", 1))
    meta = p.forward.node("max").meta
    assert isinstance(meta, tuple) and meta[1].dtype == torch.int64  # type: ignore[union-attr]
    out = run_program(p, [x])
    assert torch.equal(out[0], x.max(dim=1)[1]) and torch.equal(out[1], x[2:])


def test_constants_from_python_data_and_closures() -> None:
    c = torch.randn(3)
    x = torch.randn(2, 3)
    p = record(lambda a: a + torch.tensor([1.0, 2.0, 3.0]) + c + c, x)
    consts = [n for n in p.forward.nodes if n.op == "constant"]
    assert [n.name for n in consts] == ["_tensor_constant0", "_tensor_constant1"]
    assert torch.equal(p.tensors["_tensor_constant0"], torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(p.tensors["_tensor_constant1"], c)
    assert "aten::lift_fresh_copy.default" in targets(p)
    assert torch.equal(run_program(p, [x])[0], x + torch.tensor([1.0, 2.0, 3.0]) + c + c)


def test_inplace_ops_rebind_and_mutate_inputs() -> None:
    def f(a, b):  # type: ignore[no-untyped-def]
        a.add_(b)
        a[0].mul_(2)
        return a * 3

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    p = record(f, x.clone(), y)
    assert targets(p) == ["aten::add_.Tensor", "aten::select.int", "aten::mul_.Tensor",
                          "aten::mul.Tensor"]
    # the op after an in-place op reads the in-place node's result
    assert p.forward.node("select").args[0] == ValueRef("add_")
    xe, xi = x.clone(), x.clone()
    expected = f(xe, y)
    got = run_program(p, [xi, y])[0]
    assert torch.equal(got, expected) and torch.equal(xi, xe)


def test_out_variant_is_recorded() -> None:
    def f(a, b):  # type: ignore[no-untyped-def]
        out = torch.empty(3)
        torch.add(a, b, out=out)
        return out

    p = record(f, torch.randn(3), torch.randn(3))
    assert "aten::add.out" in targets(p)


def test_identity_output_refers_to_placeholder() -> None:
    p = record(lambda a: (a, a + 1, a), torch.randn(2))
    assert p.forward.output_values == (ValueRef("x0"), ValueRef("add"), ValueRef("x0"))


def test_requires_grad_in_meta_and_autograd_noise_dropped() -> None:
    x = torch.randn(3, requires_grad=True)
    p = record(lambda a: a.relu() * 2, x)
    assert p.forward.node("x0").meta.requires_grad is True  # type: ignore[union-attr]
    assert p.forward.node("mul").meta.requires_grad is True  # type: ignore[union-attr]
    assert targets(p) == ["aten::relu.default", "aten::mul.Tensor"]  # no detach nodes


def test_random_ops_stay_random_and_reproduce_with_seed() -> None:
    x = torch.randn(64)
    p = record(lambda a: torch.nn.functional.dropout(a, 0.5, True) + torch.rand(64), x)
    assert "aten::rand.default" in targets(p) and "aten::bernoulli_.float" in targets(p)
    torch.manual_seed(3)
    expected = torch.nn.functional.dropout(x, 0.5, True) + torch.rand(64)
    torch.manual_seed(3)
    assert torch.equal(run_program(p, [x])[0], expected)


def test_non_tensor_output_is_rejected_with_message() -> None:
    rec = GraphRecorder()
    rec.add_input(torch.randn(2), InputSpec("x"))
    with pytest.raises(RecordingError, match="output 0 is a int"):
        rec.finish([3])  # type: ignore[list-item]


def test_duplicate_input_name_and_foreign_fake() -> None:
    rec = GraphRecorder()
    rec.add_input(torch.randn(2), InputSpec("x"))
    with pytest.raises(RecordingError, match="used twice"):
        rec.add_input(torch.randn(2), InputSpec("x"))
    other = GraphRecorder().add_input(torch.randn(2), InputSpec("y"))
    with pytest.raises(RecordingError, match="another FakeTensorMode"):
        rec.add_input(other, InputSpec("z"))


def test_output_specs_and_input_specs_in_signature() -> None:
    rec = GraphRecorder()
    x = rec.add_input(torch.randn(2), InputSpec("x"))
    with rec:
        y = x.exp()
    p = rec.finish([y], [OutputSpec(OutputKind.USER_OUTPUT)])
    assert p.signature.inputs == {"forward": [InputSpec("x")]}
    assert p.signature.outputs == {"forward": [OutputSpec()]}


def test_integer_and_bool_ops() -> None:
    x = torch.randint(0, 10, (5,))
    p = record(lambda a: ((a % 3) == 1, torch.cumsum(a, 0), a.argmax()), x)
    out = run_program(p, [x])
    assert torch.equal(out[0], (x % 3) == 1) and torch.equal(out[1], torch.cumsum(x, 0))
    assert torch.equal(out[2], x.argmax())
    assert isinstance(p.forward.node("remainder").meta, TensorMeta)
    assert not isinstance(p.forward.node("remainder").meta, ScalarMeta)


def test_decompositions_record_the_ops_they_run() -> None:
    def silu(a):  # type: ignore[no-untyped-def]
        return a * torch.sigmoid(a)

    rec = GraphRecorder(decompositions={torch.ops.aten.silu.default: silu})
    x = torch.randn(5)
    fx = rec.add_input(x, InputSpec("x"))
    with rec:
        y = torch.nn.functional.silu(fx)
    p = rec.finish([y])
    assert targets(p) == ["aten::sigmoid.default", "aten::mul.Tensor"]
    assert torch.equal(run_program(p, [x])[0], silu(x))


def test_input_added_while_recording_records_no_conversion_ops() -> None:
    rec = GraphRecorder()
    x = rec.add_input(torch.randn(4), InputSpec("x"))
    view = torch.randn(8)[2:6]
    with rec:
        y = x + 1
        z = rec.add_input(view, InputSpec("z"))  # a view: its conversion runs ops
        out = y * z
    p = rec.finish([out])
    assert [n.name for n in p.forward.nodes] == ["x", "z", "add", "mul", "output"]
    assert p.forward.node("z").meta.storage_offset == 2  # type: ignore[union-attr]


def test_shared_fake_mode_and_entering_several_times() -> None:
    from ember.runtime._torch import FakeTensorMode

    mode = FakeTensorMode()
    rec = GraphRecorder(fake_mode=mode)
    assert rec.fake_mode is mode
    x = rec.add_input(torch.randn(3), InputSpec("x"))
    with rec:
        y = x.exp()
    outside = x + 0  # not recorded: the recorder is not entered
    with rec:
        z = y * 2
        with pytest.raises(RecordingError, match="already entered"):
            rec.__enter__()
    p = rec.finish([z])
    assert [n.name for n in p.forward.calls()] == ["exp", "mul"]
    assert outside.shape == (3,)
    with pytest.raises(RecordingError, match="finished"):
        rec.__enter__()
