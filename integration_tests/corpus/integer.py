"""Integer and boolean tensors: argmax, comparisons, where, bitwise ops, integer
arithmetic, cumsum."""

from __future__ import annotations

import torch

from corpus.case import case


def _compare_where(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    m = a > b
    return torch.where(m, a, b), a.argmax(dim=1), (a == b) | m, m.logical_not().sum()


@case("int_compare_where_argmax", lambda: (torch.randn(4, 6), torch.randn(4, 6)))
def compare_where() -> object:
    return _compare_where


def _bitwise(i: torch.Tensor, j: torch.Tensor) -> tuple[torch.Tensor, ...]:
    bits = ((i & 7) | (j << 1)) ^ ~i
    arith = i * j + torch.div(i, 3, rounding_mode="floor") - j % 5
    return bits, arith, i.abs().max()


@case("int_bitwise_arithmetic",
      lambda: (torch.randint(-50, 50, (8,)), torch.randint(1, 9, (8,))))
def bitwise() -> object:
    return _bitwise


def _cumsum_bool(i: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.cumsum(i, 0), b.any(dim=1), b.all(), b.to(torch.int32).sum(1), b.cumsum(1)


@case("int_cumsum_bool_reductions",
      lambda: (torch.randint(0, 100, (10,), dtype=torch.int32), torch.rand(3, 4) > 0.3))
def cumsum_bool() -> object:
    return _cumsum_bool
