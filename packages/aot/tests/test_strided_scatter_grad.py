"""Gradients through writes into views without an inverse rule (``diagonal``,
``unfold``): functionalization makes them ``as_strided_scatter``, whose torch gradient
sends the written region's gradient to ``self`` (it belongs to ``src``); the re-traces
record it with the right one (``strided_scatter_grad.py``)."""

from __future__ import annotations

import torch
from aot_capture import compile_fn


def _zero_diagonal(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    base = x * 1.5
    base.diagonal().copy_(y * 2)
    return (base * base).sum()


def _clamp_diagonal_of_slice(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    base = x * 1.5
    base[1:].diagonal().clamp_(max=0.5)
    return (base * base).sum() + y.sum()


def _scale_unfold(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    base = x * 1.5
    base.unfold(1, 2, 2).mul_(y[:1])
    return (base * base).sum()


def test_gradients_through_strided_view_writes_match_eager() -> None:
    torch.manual_seed(0)
    for fn in (_zero_diagonal, _clamp_diagonal_of_slice, _scale_unfold):
        x, y = torch.randn(5, 6), torch.randn(5)
        _, run = compile_fn(fn, x.clone().requires_grad_(), y.clone().requires_grad_())
        want_x, want_y = x.clone().requires_grad_(), y.clone().requires_grad_()
        got_x, got_y = x.clone().requires_grad_(), y.clone().requires_grad_()
        want = torch.autograd.grad(fn(want_x, want_y), (want_x, want_y))
        (out,) = run([got_x, got_y])
        got = torch.autograd.grad(out, (got_x, got_y))
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, msg=fn.__name__)
