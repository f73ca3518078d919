"""In-place ops on inputs, on intermediates and on views of both: add_, mul_, relu_,
copy_, index_put_, masked_fill_, fill_, zero_."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from corpus.case import case


def _on_input(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    x.mul_(y)
    return x.sum()


@case("inplace_on_input", lambda: (torch.randn(3, 4), torch.randn(3, 4)))
def on_input() -> object:
    return _on_input


def _on_intermediate(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    h = x * 2
    h.relu_()
    h.add_(y, alpha=0.5)
    return F.relu(h - 1, inplace=True)


@case("inplace_on_intermediate_relu_", lambda: (torch.randn(6), torch.randn(6)))
def on_intermediate() -> object:
    return _on_intermediate


def _on_view_of_input(x: torch.Tensor) -> torch.Tensor:
    x[0].mul_(2)
    x[:, 1].zero_()
    return x + 1


@case("inplace_on_view_of_input", lambda: (torch.randn(3, 4),))
def on_view_of_input() -> object:
    return _on_view_of_input


def _on_view_of_intermediate(x: torch.Tensor) -> torch.Tensor:
    h = x.clone()
    v = h.view(-1)
    v[::2].fill_(0.25)
    h.t()[1].add_(x[:, 0])
    return h


@case("inplace_on_view_of_intermediate", lambda: (torch.randn(4, 4),))
def on_view_of_intermediate() -> object:
    return _on_view_of_intermediate


def _copy_index_put(x: torch.Tensor, idx: torch.Tensor, vals: torch.Tensor) -> torch.Tensor:
    h = torch.empty(5, 3)
    h.copy_(x)
    h.index_put_((idx,), vals, accumulate=True)
    return h * 3


@case("inplace_copy_index_put",
      lambda: (torch.randn(5, 3), torch.tensor([4, 0, 4]), torch.randn(3, 3)))
def copy_index_put() -> object:
    return _copy_index_put


def _masked_fill(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    x.masked_fill_(x > 0.5, 0.5)
    y = x * 2
    y.masked_fill_(m, -1.0)
    return y


@case("inplace_masked_fill_", lambda: (torch.randn(4, 5), torch.rand(4, 5) > 0.5))
def masked_fill() -> object:
    return _masked_fill


def _index_put_on_input(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    x[i] = x[i] * 10
    return x.sum(0)


@case("inplace_setitem_on_input", lambda: (torch.randn(6, 2), torch.tensor([1, 3])))
def index_put_on_input() -> object:
    return _index_put_on_input
