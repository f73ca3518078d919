"""A graph output that is a view of a value the graph made (a `zeros_like` the capture
records with a `detach`) is written in place after a graph break by a value that
requires grad: eager allows it; a view returned from an autograd.Function may not be
written so, so the runtime returns its base and takes the view outside."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch


def scatter_rows(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = h @ w
    out = torch.zeros_like(h)
    rows = (h.sum(1) > 0).nonzero()  # data-dependent: a break, the loop runs eagerly
    for i in rows:
        out.index_add_(0, i, h[i] * 2)
    return out * 3


def zeros_and_value(h: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = h @ w
    return torch.zeros_like(h), h


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_in_place_write_with_grad_after_a_break_matches_eager(backend: str) -> None:
    h = torch.randn(6, 3)
    w1 = torch.randn(3, 3, requires_grad=True)
    w2 = w1.detach().clone().requires_grad_()
    expected = scatter_rows(h, w1)
    compiled = ef.compile(scatter_rows, backend=backend)
    got = compiled(h, w2)
    torch.testing.assert_close(got, expected)
    expected.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(w2.grad, w1.grad)
    assert compiled.stats.graph_breaks >= 1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_the_returned_zeros_are_a_plain_tensor_of_their_own(backend: str) -> None:
    h = torch.randn(4, 3)
    w = torch.randn(3, 3, requires_grad=True)
    zeros, value = ef.compile(zeros_and_value, backend=backend)(h, w)
    assert not zeros.requires_grad and value.requires_grad
    assert zeros.untyped_storage().data_ptr() != value.untyped_storage().data_ptr()
    zeros.add_(value)  # in place, with grad: as eagerly
    assert zeros.requires_grad
    zeros.sum().backward()
    torch.testing.assert_close(w.grad, h.sum(0, keepdim=True).T.expand(3, 3))
