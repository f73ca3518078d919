"""The private torch APIs the aot stage uses, in one place (DESIGN.md §5).

A torch upgrade that moves one of these touches only this file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._decomp import core_aten_decompositions  # torch's Core ATen decomposition table
from torch._decomp import decomposition_table as _all_decompositions  # every registered one
from torch.utils._python_dispatch import TorchDispatchMode  # a Python dispatch hook

__all__ = [
    "TorchDispatchMode", "current_autograd_node", "decomposition_table_for_core_aten", "has_composite_implicit_kernel",
    "is_core_op",
]

Decomposition = Callable[..., Any]


def is_core_op(op: torch._ops.OpOverload) -> bool:
    """True when ``op`` belongs to torch's Core ATen opset (it carries the ``core`` tag)."""
    return torch.Tag.core in op.tags


# Ops outside the Core ATen opset that torch's core table leaves alone but that have a
# registered decomposition into Core ATen ops (checked against torch 2.13).
EXTRA_DECOMPOSED_OPS: tuple[str, ...] = (
    "native_batch_norm.default",
    "_native_batch_norm_legit.default",
    "_native_batch_norm_legit.no_stats",
    "_native_batch_norm_legit_no_training.default",
    "_native_batch_norm_legit_functional.default",
    "_batch_norm_with_update_functional.default",
)


def decomposition_table_for_core_aten(
    keep: frozenset[str] = frozenset(),
) -> dict[torch._ops.OpOverload, Decomposition]:
    """Decompositions that bring a program down to Core ATen: torch's own Core ATen
    table, less the ops it names in ``keep`` (qualified names a backend wants whole, e.g.
    fused attention), plus the registered decompositions of :data:`EXTRA_DECOMPOSED_OPS`."""
    core: dict[torch._ops.OpOverload, Decomposition] = dict(core_aten_decompositions())
    table = {op: fn for op, fn in core.items()
             if not (isinstance(op, torch._ops.OpOverload) and _qualified(op) in keep)}
    for name in EXTRA_DECOMPOSED_OPS:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        if isinstance(op, torch._ops.OpOverload) and op in _all_decompositions:
            table.setdefault(op, _all_decompositions[op])
    return table


def current_autograd_node() -> Any:
    """The autograd graph node whose backward is running now (None outside backward)."""
    return torch._C._current_autograd_node()


def _qualified(op: torch._ops.OpOverload) -> str:
    return f"{op._schema.name}.{op._overloadname or 'default'}"


def has_composite_implicit_kernel(op: torch._ops.OpOverload) -> bool:
    """True for an op torch implements by calling other ops (CompositeImplicitAutograd):
    a dispatch mode below autograd still sees it and must decompose it itself."""
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(
            op.name(), "CompositeImplicitAutograd"))  # type: ignore[no-untyped-call]
    except RuntimeError:  # prim:: ops that the dispatcher does not register
        return False
