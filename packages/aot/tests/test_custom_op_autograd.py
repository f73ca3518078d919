"""Custom operators in training: a ``register_autograd`` operator is opaque in the forward
graph and its backward formula's operators are traced into the backward graph; a
mutating operator (a running average buffer) stays in the forward graph with the buffer
it writes saved after the write, never recomputed. Gradients and buffers against eager."""

from __future__ import annotations

import dataclasses

import torch
from aot_capture import compile_fn, compile_module
from ember.runtime.ir import Program, print_graph


@torch.library.custom_op("ember_aot_grad_test::mysin", mutates_args=())
def mysin(x: torch.Tensor) -> torch.Tensor:
    return x.sin()


@mysin.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("ember_aot_grad_test::mycos", mutates_args=())
def mycos(x: torch.Tensor) -> torch.Tensor:
    return x.cos()


@mycos.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _setup(ctx: torch.autograd.function.FunctionCtx, inputs: tuple[torch.Tensor],
           output: torch.Tensor) -> None:
    ctx.save_for_backward(inputs[0])  # type: ignore[attr-defined]


def _backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors  # type: ignore[attr-defined]
    return grad * mycos(x)


mysin.register_autograd(_backward, setup_context=_setup)


@torch.library.custom_op("ember_aot_grad_test::ema_", mutates_args=("avg",))
def ema_(avg: torch.Tensor, x: torch.Tensor, momentum: float) -> None:
    avg.mul_(1 - momentum).add_(x, alpha=momentum)


@ema_.register_fake
def _(avg: torch.Tensor, x: torch.Tensor, momentum: float) -> None:
    return None


def _text(program: Program, name: str) -> str:
    graph = program.graphs[name]
    graph.nodes = [dataclasses.replace(n, source=None) for n in graph.nodes]
    return print_graph(graph, name, program.signature.inputs[name],
                       program.signature.outputs[name])


def _sin_loss(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (mysin(x * w) * 2).sum()


BACKWARD = """\
graph backward(
    %saved_in0: f32[4]{1} cpu requires_grad,
    %saved_in1: f32[4]{1} cpu requires_grad,
    %saved_mycos: f32[4]{1} cpu,
    %tangent_0: f32[]{} cpu,
):
  %expand: f32[4]{0} cpu = aten::expand.default(%tangent_0, [4])
  %mul_2: f32[4]{1} cpu = aten::mul.Tensor(%expand, 2)
  %mul_3: f32[4]{1} cpu = aten::mul.Tensor(%mul_2, %saved_mycos)
  %mul_4: f32[4]{1} cpu = aten::mul.Tensor(%mul_3, %saved_in0)
  %mul_5: f32[4]{1} cpu = aten::mul.Tensor(%mul_3, %saved_in1)
  return (%mul_5, %mul_4)  [gradient in0, gradient in1]
"""


def test_the_backward_formula_calls_the_users_operators() -> None:
    x, w = (torch.randn(4, requires_grad=True) for _ in range(2))
    program, run = compile_fn(_sin_loss, x, w)
    # the formula's mycos runs in the forward graph (a custom op is never recomputed)
    # and is saved; the backward graph multiplies
    assert "ember_aot_grad_test::mysin.default" in _text(program, "forward")
    assert "ember_aot_grad_test::mycos.default(%mul)" in _text(program, "forward")
    assert _text(program, "backward") == BACKWARD
    mine = [t.detach().clone().requires_grad_() for t in (x, w)]
    run(mine)[0].backward()
    _sin_loss(x, w).backward()
    for a, b in zip(mine, (x, w)):
        torch.testing.assert_close(a.grad, b.grad)


class _Averaged(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("avg", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        ema_(self.avg, y.detach().mean(0), 0.1)
        return (mysin(y) * self.avg).sum()


def test_a_buffer_written_in_training_is_written_once_and_saved_after_the_write() -> None:
    torch.manual_seed(0)
    model, reference = _Averaged(), _Averaged()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(3, 4)
    program, run = compile_module(model, x)
    forward = _text(program, "forward")
    assert forward.count("ember_aot_grad_test::ema_.default(%clone, %mean, 0.1)") == 1
    assert "saved_tensor saved_clone" in forward  # the written buffer, after the write
    assert "ema_" not in _text(program, "backward")
    for _ in range(3):
        run(x)[0].backward()
        reference(x).backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
        torch.testing.assert_close(model.avg, reference.avg)
