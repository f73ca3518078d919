"""View ops: view, reshape, permute, transpose, slicing, select, expand, unsqueeze,
narrow, chunk/split, unbind."""

from __future__ import annotations

import torch

from corpus.case import case


def _view_reshape_permute(x: torch.Tensor) -> torch.Tensor:
    y = x.view(2, 3, 4).permute(2, 0, 1)  # non-contiguous
    return y.reshape(4, 6).t().contiguous() * 2


@case("views_view_reshape_permute", lambda: (torch.randn(24),))
def view_reshape_permute() -> object:
    return _view_reshape_permute


def _slicing(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x[1:, ::2], x[:, 0], x.narrow(1, 2, 3), x[..., None][-1], x.select(0, 2)


@case("views_slicing_select_narrow", lambda: (torch.randn(5, 7),))
def slicing() -> object:
    return _slicing


def _expand(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.unsqueeze(1).expand(-1, 3, -1) + y.unsqueeze(0)


@case("views_expand_unsqueeze", lambda: (torch.randn(4, 5), torch.randn(3, 5)))
def expand() -> object:
    return _expand


def _chunk_split_unbind(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=0)
    c = x.split([1, 3], dim=1)
    rows = x.unbind(0)
    return a * b + c[0].sum() - c[1].mean(0).sum() + rows[0].sum() * rows[-1]


@case("views_chunk_split_unbind", lambda: (torch.randn(4, 4),))
def chunk_split_unbind() -> object:
    return _chunk_split_unbind


def _transpose_matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x.transpose(0, 1) @ y).flatten().view(-1, 2)


@case("views_transpose_matmul_flatten", lambda: (torch.randn(5, 4), torch.randn(5, 6)))
def transpose_matmul() -> object:
    return _transpose_matmul
