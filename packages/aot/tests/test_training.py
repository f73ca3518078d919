"""Training through the aot stage: one optimizer step gives the parameters and gradients
eager torch gives (float32, the tolerance of docs/architecture.md), for an MLP, a conv net with
BatchNorm and a transformer block."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable

import pytest
import torch
from aot_capture import compile_fn, compile_module
from ember.runtime.ir import OutputKind
from ember_testing.training import (
    MODELS,
    TransformerBlock,
    assert_same_training_state,
    mlp,
    sgd_step,
)


@pytest.mark.parametrize("name,make_model,make_input", MODELS, ids=[m[0] for m in MODELS])
def test_one_optimizer_step_matches_eager(name: str, make_model: Callable[[], torch.nn.Module],
                                          make_input: Callable[[], torch.Tensor]) -> None:
    torch.manual_seed(0)
    eager = make_model().train()
    compiled = copy.deepcopy(eager)
    x = make_input()
    program, run = compile_module(compiled, x)
    assert "backward" in program.graphs
    target = torch.randn_like(eager(x.clone()).detach())
    # the probe call above updated BatchNorm statistics: start both from the same state
    compiled.load_state_dict(eager.state_dict())

    sgd_step(eager, eager, x, target)
    sgd_step(compiled, lambda inp: run(inp)[0], x, target)
    assert_same_training_state(eager, compiled)


def test_input_without_grad_and_no_grad_call() -> None:
    model = mlp()
    x = torch.randn(8, 16)
    program, run = compile_module(model, x)
    grads = [s.target for s in program.signature.outputs["backward"]]
    assert "in0" not in grads and len(grads) == 6  # x does not require grad
    with torch.no_grad():
        (out,) = run(x)
    assert out.grad_fn is None
    torch.testing.assert_close(out, model(x))


def test_non_differentiable_output() -> None:
    class WithIndex(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y = self.lin(x)
            return y.sum(), y.argmax(dim=1)

    model = WithIndex()
    x = torch.randn(3, 4)
    program, run = compile_module(model, x)
    assert program.metadata["aot"]["differentiable_outputs"] == [0]  # type: ignore[index]
    loss, idx = run(x)
    assert not idx.requires_grad
    torch.testing.assert_close(idx, model(x)[1])
    loss.backward()
    expected = torch.autograd.grad(model(x)[0], model.lin.weight)[0]
    torch.testing.assert_close(model.lin.weight.grad, expected)


def test_batch_norm_running_statistics_take_no_tangent() -> None:
    # the decomposed batch norm computes the new running statistics from the batch's:
    # they look differentiable, but ATen defines them as not (non_differentiable.py)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.BatchNorm2d(4), torch.nn.ReLU()).train()
    reference = copy.deepcopy(model)
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    program, run = compile_module(model, x)
    kinds = [s.kind for s in program.signature.outputs["forward"]]
    assert OutputKind.MUTATED_INPUT in kinds
    assert program.metadata["aot"]["differentiable_outputs"] == [0]  # type: ignore[index]
    tangents = [p for p in program.graphs["backward"].placeholders if p.name.startswith("tangent")]
    assert len(tangents) == 1, [p.name for p in tangents]
    model.load_state_dict(reference.state_dict())
    xc = x.detach().clone().requires_grad_()
    (run(xc)[0] ** 2).sum().backward()
    (reference(x) ** 2).sum().backward()
    torch.testing.assert_close(xc.grad, x.grad)
    torch.testing.assert_close(model[0].running_mean, reference[0].running_mean)
    assert not model[0].running_mean.requires_grad


def test_the_non_differentiable_table_names_the_running_statistics() -> None:
    from ember.aot.non_differentiable import NON_DIFFERENTIABLE_OUTPUTS

    for name, positions in NON_DIFFERENTIABLE_OUTPUTS.items():
        op = getattr(getattr(torch.ops.aten, name.split("::")[1].split(".")[0]), "default")
        returns = [r.name for r in op._schema.returns]
        assert sorted(returns[i] for i in positions) == ["running_mean_out",
                                                         "running_var_out"], (name, returns)


def test_saved_tensors_are_labelled() -> None:
    program, _ = compile_module(mlp(), torch.randn(8, 16))
    kinds = [s.kind for s in program.signature.outputs["forward"]]
    n_saved = kinds.count(OutputKind.SAVED_TENSOR)
    assert kinds[0] == OutputKind.USER_OUTPUT and n_saved > 0
    backward_inputs = [p.name for p in program.graphs["backward"].placeholders]
    assert all(n.startswith("saved_") for n in backward_inputs[:n_saved])
    assert backward_inputs[n_saved:] == ["tangent_0"]


def test_gradients_through_aliased_outputs() -> None:
    def fn(x, w):
        y = x @ w
        return y, y.view(-1), x[0], w.t()

    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5, requires_grad=True)
    program, run = compile_fn(fn, x, w)
    kinds = [s.kind for s in program.signature.outputs["forward"]][:4]
    assert kinds == [OutputKind.USER_OUTPUT] + [OutputKind.ALIASED_OUTPUT] * 3
    weights = [torch.randn(3, 5), torch.randn(15), torch.randn(4), torch.randn(5, 4)]

    def loss(outputs: list[torch.Tensor]) -> torch.Tensor:
        return sum((o * k).sum() for o, k in zip(outputs, weights))  # type: ignore[return-value]

    expected = torch.autograd.grad(loss(list(fn(x, w))), [x, w])
    outputs = run([x, w])
    assert outputs[2]._base is x or outputs[2].untyped_storage().data_ptr() == x.data_ptr()
    got = torch.autograd.grad(loss(outputs), [x, w])
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e)


def test_no_grad_block_inside_the_function_stops_gradients() -> None:
    teacher = torch.nn.Linear(4, 4)
    student = torch.nn.Linear(4, 4)

    class Distill(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.teacher, self.student = teacher, student

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                target = self.teacher(x).relu()
            return ((self.student(x) - target) ** 2).mean()

    model = Distill()
    x = torch.randn(5, 4)
    program, run = compile_module(model, x)
    grads = {s.target for s in program.signature.outputs["backward"]}
    assert grads == {"student_weight", "student_bias"}
    (loss,) = run(x)
    loss.backward()
    assert teacher.weight.grad is None
    expected = torch.autograd.grad(model(x), student.weight)[0]
    torch.testing.assert_close(student.weight.grad, expected)


def test_compiling_under_no_grad_builds_no_backward() -> None:
    with torch.no_grad():
        program, _ = compile_module(mlp(), torch.randn(8, 16))
    assert set(program.graphs) == {"forward"}


def test_backward_executor_is_built_on_first_backward_only() -> None:
    from ember.runtime.callable import ProgramCallable
    from ember.runtime.executor import make_executor

    model = mlp()
    x = torch.randn(8, 16)
    program, _ = compile_module(model, x)
    built: list[str] = []

    def factory(p, graph):  # type: ignore[no-untyped-def]
        built.append(graph)
        return make_executor(p, graph)

    run = ProgramCallable(program, executor_factory=factory)
    state = [p for p in model.parameters()]
    with torch.no_grad():
        run([x, *state])
    assert built == ["forward"]
    run([x, *state])[0].sum().backward()
    run([x, *state])[0].sum().backward()
    assert built == ["forward", "backward"]


def test_backward_nodes_carry_the_forward_source_line() -> None:
    program, _ = compile_module(TransformerBlock(), torch.randn(2, 6, 32))
    calls = program.graphs["backward"].calls()
    block_file = inspect.getfile(TransformerBlock)
    from_forward = [n for n in calls if n.source is not None
                    and n.source.function == "forward" and n.source.file == block_file]
    # every backward op but the gradient accumulations autograd adds itself
    assert len(from_forward) >= 0.8 * len(calls), [str(n.source) for n in calls]


def test_written_activation_keeps_autograd_history() -> None:
    def fn(x, w):
        x.mul_(2)
        return (x * w).sum()

    leaf = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(3, 4, requires_grad=True)
    _, run = compile_fn(fn, leaf.clone(), w)

    def loss(call: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        x = leaf * 1.5  # a non-leaf activation the function writes
        out = call(x, w)
        return out + (x * x).sum()  # uses x after the write: its new value and history

    expected = torch.autograd.grad(loss(fn), [leaf, w])
    got = torch.autograd.grad(loss(lambda x, w_: run([x, w_])[0]), [leaf, w])
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e)


def test_saved_tensor_hooks_apply_once_at_run_time() -> None:
    """Compiled under ``saved_tensors_hooks(pack, unpack)``, the backward is derived
    without them; they apply to the compiled forward's saved values when it runs, once,
    as eager applies them (the derived backward had computed with ``pack``'s results,
    and a pack that doubles its tensor doubled the gradient twice)."""
    def double(t: torch.Tensor) -> torch.Tensor:
        return t * 2

    def keep(t: torch.Tensor) -> torch.Tensor:
        return t

    x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(double, keep):
        program, run = compile_fn(torch.exp, x)
        x.exp().sum().backward()
        expected = x.grad.clone()
        x.grad = None
        run([x])[0].sum().backward()
    torch.testing.assert_close(x.grad, expected)  # 2 * exp(x)
    x.grad = None
    run([x])[0].sum().backward()  # without hooks: the plain gradient
    torch.testing.assert_close(x.grad, x.detach().exp())
