"""Grad-mode blocks inside a function compiled with the tracing capture
(ember/frontend/trace_grad.py): values made under ``no_grad`` get no gradient with every
backend (the eager backend's interpreter differentiated through them), and an
``enable_grad`` block under the caller's ``no_grad`` makes values that require grad
(every backend ran the graph under ``no_grad``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import pytest
import torch
from torch import nn

BACKENDS = ["eager", "aot_eager"]


def _model() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(8, 8)


def _results(fn: Callable[[torch.Tensor], tuple[torch.Tensor, ...]], m: nn.Linear,
             grad: bool) -> tuple[list[torch.Tensor], list[bool], torch.Tensor | None]:
    """``fn``'s outputs under grad mode ``grad``, which of them require grad, and the
    weight's gradient of the sum of those that do."""
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    m.weight.grad = None
    with torch.set_grad_enabled(grad):
        outs = list(fn(x))
    flags = [o.requires_grad for o in outs]
    tracked = [o.float().sum() for o in outs if o.requires_grad]
    if tracked:
        torch.autograd.backward(tracked)
    return outs, flags, m.weight.grad


def _same_as_eager(make: Callable[[nn.Linear], Callable[..., Any]], backend: str,
                   grad: bool) -> None:
    m = _model()
    fn = make(m)
    expected, expected_flags, expected_grad = _results(fn, m, grad)
    compiled = ef.compile(fn, backend=backend, options={"capture": "trace"})
    got, flags, got_grad = _results(compiled, m, grad)
    assert flags == expected_flags
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g, e)
    if expected_grad is None:
        assert got_grad is None
    else:
        assert got_grad is not None
        torch.testing.assert_close(got_grad, expected_grad)


def _no_grad_block(m: nn.Linear) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.no_grad():
            a = m(x)
        return a, m(x) * a
    return fn


def _enable_grad_block(m: nn.Linear) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.enable_grad():
            a = m(x)
        return a, m(x)
    return fn


def _autocast_no_grad(m: nn.Linear) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with torch.no_grad():
                a = m(x)
            b = m(x)
        return a, b, m(x) * a.float()
    return fn


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_grad_block_has_no_gradient(backend: str) -> None:
    _same_as_eager(_no_grad_block, backend, grad=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_enable_grad_block_under_no_grad(backend: str) -> None:
    _same_as_eager(_enable_grad_block, backend, grad=False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast_with_a_no_grad_block(backend: str) -> None:
    _same_as_eager(_autocast_no_grad, backend, grad=True)


def test_update_under_no_grad_still_writes_the_parameter() -> None:
    """An in-place write made with grad mode off keeps writing the tensor itself."""
    m = _model()
    before = m.weight.detach().clone()

    def step(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            m.weight.mul_(2)
        return x * 1

    compiled = ef.compile(step, backend="eager", options={"capture": "trace"})
    compiled(torch.randn(2))
    torch.testing.assert_close(m.weight.detach(), before * 2)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_a_forward_all_inside_enable_grad_called_under_no_grad(backend: str) -> None:
    # before: no op ran with grad mode off, so the graph took the caller's no_grad and its
    # result had no gradient (eager's has one)
    torch.manual_seed(0)

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.enable_grad():
                return self.a(x)

    m = M()
    compiled = ef.compile(m, backend=backend, options={"capture": "trace"})
    x = torch.randn(2, 4)
    with torch.no_grad():
        y = compiled(x)
    assert y.requires_grad
    y.sum().backward()
    got = m.a.weight.grad.clone()
    m.a.weight.grad = None
    with torch.no_grad():
        expected = m(x)
    expected.sum().backward()
    torch.testing.assert_close(got, m.a.weight.grad)
