"""``matmul`` over symbolic sizes, spelled out in Python while a dynamic recorder runs.

``torch.matmul`` (and ``@``) is a composite that ATen expands in C++ into ``mm``,
``bmm``, ``expand`` and ``reshape``. On some torch builds (2.11 with CUDA fake tensors)
that expansion asks a fake tensor for its plain integer sizes (``aten.size.default``),
which turns every symbolic size of both operands into a guard on its current value: a
batch sweep over the heads of a fused qkv projection then compiled once per batch size.
:class:`SymbolicMatmul`, a torch-function mode a dynamic recorder enters, expands
``matmul`` itself whenever an operand has a symbolic size, with the documented semantics
of ``torch.matmul`` (1-D operands promoted and their dim removed again, batch dims
broadcast), so only ``mm``/``mv``/``dot``/``bmm`` and views reach the dispatcher and the
symbols stay symbols. Static operands, ``out=`` and 0-d operands go to torch unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["SymbolicMatmul", "symbolic_matmul"]

_MATMULS = frozenset({torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__})


def _is_symbolic(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and any(
        isinstance(s, torch.SymInt) for s in value.shape)


def _broadcast(a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    """The broadcast of two batch shapes (sizes or SymInts), right-aligned."""
    n = max(len(a), len(b))
    a = [1] * (n - len(a)) + list(a)
    b = [1] * (n - len(b)) + list(b)
    out: list[Any] = []
    for x, y in zip(a, b):
        if isinstance(x, int) and x == 1:
            out.append(y)
        elif isinstance(y, int) and y == 1:
            out.append(x)
        else:  # equal, or expand below raises as torch.matmul would
            out.append(x)
    return out


def symbolic_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.matmul(a, b)`` for operands of one or more dims, as ``dot``, ``mv``, ``mm``
    or a ``bmm`` over the broadcast batch (each operand expanded and flattened to 3-D)."""
    if a.dim() == 1 and b.dim() == 1:
        return torch.dot(a, b)
    if a.dim() == 2 and b.dim() == 1:
        return torch.mv(a, b)
    if a.dim() == 1 and b.dim() == 2:
        return torch.mm(a.unsqueeze(0), b).squeeze(0)
    if a.dim() == 2 and b.dim() == 2:
        return torch.mm(a, b)
    drop_row, drop_col = a.dim() == 1, b.dim() == 1
    a2 = a.unsqueeze(0) if drop_row else a
    b2 = b.unsqueeze(-1) if drop_col else b
    n, k = a2.shape[-2], a2.shape[-1]
    m = b2.shape[-1]
    batch = _broadcast(a2.shape[:-2], b2.shape[:-2])
    a3 = a2.expand(*batch, n, k).reshape(-1, n, k)
    b3 = b2.expand(*batch, k, m).reshape(-1, k, m)
    out = torch.bmm(a3, b3).view(*batch, n, m)
    if drop_col:
        out = out.squeeze(-1)
    if drop_row:
        out = out.squeeze(-2)
    return out


class SymbolicMatmul(TorchFunctionMode):
    """Routes ``matmul``/``@`` with a symbolically sized operand to
    :func:`symbolic_matmul`; every other call runs unchanged."""

    def __torch_function__(self, func: Callable[..., Any], types: Any,
                           args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
                           ) -> Any:
        kwargs = kwargs or {}
        if (func in _MATMULS and not kwargs and len(args) == 2
                and all(isinstance(x, torch.Tensor) and x.dim() > 0 for x in args)
                and any(_is_symbolic(x) for x in args)):
            return symbolic_matmul(args[0], args[1])
        if func is torch.Tensor.__rmatmul__ and not kwargs and len(args) == 2 \
                and all(isinstance(x, torch.Tensor) and x.dim() > 0 for x in args) \
                and any(_is_symbolic(x) for x in args):
            return symbolic_matmul(args[1], args[0])
        return func(*args, **kwargs)
