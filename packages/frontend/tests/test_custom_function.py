"""Custom ``torch.autograd.Function`` s keep their own backward (custom_functions.py,
function_ops.py): the strict capture makes ``apply`` one operator whose backward is the
user's when gradients flow through it (a graph break, naming why, when the operator
cannot stand for it) and captures its forward otherwise; the tracing capture refuses a
traced output computed through one. Before, the forward's ops were recorded and
differentiated by the aot stage (the user's backward ignored) or cut from autograd (HF
Bloom's GELU: no gradient for the layers below it). More: test_custom_function_ops.py."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch
from ember.frontend.bytecode import FullGraphError
from ember.frontend.trace import CaptureError
from ember.runtime.config import patch


class CubeGrad(torch.autograd.Function):
    """Forward ``x * x``; a backward that is deliberately not its derivative (3gx, not
    2gx): only the user's backward gives these gradients."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)  # type: ignore[attr-defined]
        return x * x

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors  # type: ignore[attr-defined]
        return 3 * grad * x


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)
        self.outer = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.outer(CubeGrad.apply(self.inner(x)) + 1)


def _grads(model: torch.nn.Module, fn: object, x: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    fn(x).sum().backward()  # type: ignore[operator]
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_the_strict_capture_runs_the_users_backward_in_the_graph() -> None:
    torch.manual_seed(0)
    model, x = Block(), torch.randn(3, 4)
    compiled = ef.compile(model)
    got = _grads(model, compiled, x)
    want = _grads(model, model, x)
    assert sorted(got) == sorted(want) == ["inner.bias", "inner.weight", "outer.bias",
                                           "outer.weight"]
    for name in want:
        torch.testing.assert_close(got[name], want[name])
    assert compiled.stats.graph_breaks == 0 and compiled.stats.graphs == 1


class MarksDirty(torch.autograd.Function):
    """An in-place forward (``mark_dirty``): no operator stands for it."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        ctx.mark_dirty(x)  # type: ignore[attr-defined]
        return x.mul_(2)

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2


def marks_dirty(x: torch.Tensor) -> torch.Tensor:
    return MarksDirty.apply(x * 1) + 1


def test_the_strict_capture_runs_the_users_backward_at_a_graph_break(
        capsys: pytest.CaptureFixture[str]) -> None:
    x1 = torch.randn(3, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    compiled = ef.compile(marks_dirty)
    with patch(logs=frozenset({"graph_breaks"})):
        compiled(x2).sum().backward()
    marks_dirty(x1).sum().backward()
    torch.testing.assert_close(x2.grad, x1.grad)
    assert compiled.stats.graph_breaks == 1 and compiled.stats.graphs == 2
    err = capsys.readouterr().err
    assert ("custom autograd.Function test_custom_function.MarksDirty.apply with inputs "
            "that require grad: its forward calls ctx.mark_dirty") in err
    assert "MarksDirty.apply(x * 1)" in err  # the user's line


def test_without_gradients_the_forward_is_captured_in_one_graph() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return CubeGrad.apply(x + 1) * 2

    compiled = ef.compile(fn, fullgraph=True)
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), fn(x))  # no input requires grad
    with torch.no_grad():
        torch.testing.assert_close(compiled(x.requires_grad_()), fn(x))
    assert compiled.stats.graph_breaks == 0


def test_fullgraph_names_the_function_when_gradients_flow() -> None:
    compiled = ef.compile(lambda x: MarksDirty.apply(x * 1) * 2, fullgraph=True)
    with pytest.raises(FullGraphError, match=r"custom autograd.Function .*MarksDirty.apply "
                                             r"with inputs that require grad"):
        compiled(torch.randn(5, requires_grad=True))
    compiled = ef.compile(lambda x: CubeGrad.apply(x) * 2, fullgraph=True)
    x = torch.randn(5, requires_grad=True)
    compiled(x).sum().backward()
    torch.testing.assert_close(x.grad, 6 * x.detach())  # the user's 3gx, times 2


def test_the_tracing_capture_refuses_an_output_computed_through_one() -> None:
    model, x = Block(), torch.randn(3, 4)
    compiled = ef.compile(model, options={"capture": "trace"})
    with pytest.raises(CaptureError, match=r"custom autograd.Function "
                                           r"test_custom_function.CubeGrad, whose backward "
                                           r"is user code"):
        compiled(x)
    with torch.no_grad():
        traced = ef.compile(model, options={"capture": "trace"})
        torch.testing.assert_close(traced(x), model(x))

