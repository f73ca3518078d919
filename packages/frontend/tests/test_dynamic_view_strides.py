"""dynamic=True on a tensor whose strides are no products of its sizes (a slice of a
parameter live across a graph break): its sizes stay static, not a stride symbol the
graph cannot bind (dynamic.dims_of)."""

from __future__ import annotations

import ember.frontend as ef
import torch
from torch import nn


class _PosSlices(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, 17, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tok = self.pos[:, :1]  # strides (136, 8, 1): 136 is no product of its sizes
        grid = self.pos[0, 1:].reshape(1, 4, 4, -1).permute(0, 3, 1, 2)
        # interpolate to a symbolic size breaks the graph; tok is live across it
        grid = nn.functional.interpolate(grid, size=(x.shape[1], x.shape[1]), mode="bilinear")
        return tok.sum() + grid.sum() + x


def test_parameter_slice_live_across_a_break_under_dynamic_true() -> None:
    m = _PosSlices()
    compiled = ef.compile(m, backend="eager", dynamic=True)
    with torch.no_grad():
        for n in (4, 6):
            x = torch.randn(2, n)
            torch.testing.assert_close(compiled(x), m(x))


def test_slice_argument_under_dynamic_true() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    compiled = ef.compile(f, backend="eager", dynamic=True)
    for n in (4, 6):
        base = torch.randn(n, 5)
        torch.testing.assert_close(compiled(base[:, :1]), f(base[:, :1]))
