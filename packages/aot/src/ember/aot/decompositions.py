"""Ember's own decompositions, for ops torch registers none for but which are not in the
Core ATen opset. One function per op, registered next to it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

EMBER_DECOMPOSITIONS: dict[torch._ops.OpOverload, Callable[..., Any]] = {}


def register(op: torch._ops.OpOverload) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        EMBER_DECOMPOSITIONS[op] = fn
        return fn
    return wrap


@register(torch.ops.aten.empty_permuted.default)
def empty_permuted(size: list[int], physical_layout: list[int], *, dtype: Any = None,
                   layout: Any = None, device: Any = None, pin_memory: Any = None) -> Any:
    """An uninitialised tensor whose dimensions lie in memory in ``physical_layout``
    order: ``empty_strided`` with the strides that order implies."""
    strides = [0] * len(size)
    step = 1
    for dim in reversed(physical_layout):
        strides[dim] = step
        step *= max(int(size[dim]), 1)
    return torch.ops.aten.empty_strided.default(
        size, strides, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)
