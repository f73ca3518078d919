"""A correct gradient for ``as_strided_scatter``, which functionalization emits for writes
through views without an inverse rule (``diagonal``, ``unfold``, ``as_strided``).

Torch's own formula gives ``self`` the gradient of the written region (the gradient
``src`` should get) instead of the rest: a training graph whose forward wrote through a
diagonal (``y.diagonal().zero_()``) had wrong gradients. The re-traces record the op
through :class:`_AsStridedScatter`, whose backward is: to ``self``, the incoming
gradient with the written region zeroed; to ``src``, the written region of it. Both
address a row-major copy of the gradient at offset 0, as the forward addresses its input
(``view_inverse.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

aten = torch.ops.aten

#: the op in the IR
AS_STRIDED_SCATTER = "aten::as_strided_scatter.default"


class _AsStridedScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, base: torch.Tensor, src: torch.Tensor, size: Sequence[int],
                stride: Sequence[int], offset: int | None) -> torch.Tensor:
        ctx.geometry = (list(size), list(stride), offset or 0)
        result: torch.Tensor = aten.as_strided_scatter.default(base, src, size, stride, offset)
        return result

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        size, stride, offset = ctx.geometry
        dense = aten.clone.default(grad, memory_format=torch.contiguous_format)
        zeros = aten.new_zeros.default(dense, size)
        to_base = aten.as_strided_scatter.default(dense, zeros, size, stride, offset)
        to_src = aten.clone.default(aten.as_strided.default(dense, size, stride, offset))
        return to_base, to_src, None, None, None


def record_as_strided_scatter(args: Sequence[Any]) -> torch.Tensor:
    """Run ``as_strided_scatter(*args)`` while a re-trace records, with the gradient of
    the module doc when an operand requires grad."""
    base, src, size, stride = args[:4]
    offset = args[4] if len(args) > 4 else None
    if torch.is_grad_enabled() and (base.requires_grad or src.requires_grad):
        apply: Any = _AsStridedScatter.apply
        result = apply(base, src, size, stride, offset)
        assert isinstance(result, torch.Tensor)
        return result
    plain: torch.Tensor = aten.as_strided_scatter.default(base, src, size, stride, offset)
    return plain
