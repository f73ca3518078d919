"""torch calls that would specialise symbolic sizes, kept symbolic while a dynamic
capture (strict or trace) runs them on fake tensors.

- ``torch.tensor(n)`` / ``torch.as_tensor`` of a (nested list of) symbolic ints
  (among plain numbers): torch's constructor reads each item as a Python number (a
  guard pinning the size). Built instead from 0-d ``torch.full`` tensors, stacked and
  reshaped: the same values, dtype (ints: int64, with a float: the default dtype) and
  device. (A symbolic float, which the IR does not hold, is still specialised.)
- ``F.one_hot(x, num_classes=n)`` with a symbolic ``n``: the C++ op takes an ``int``.
  Built instead as ``zeros(*x.shape, n).scatter_(-1, x.unsqueeze(-1), 1)``, whose
  ``scatter_`` refuses an index out of range as ``one_hot`` does.
- ``F.multilabel_margin_loss``: recorded as its aten op, not through torch's Python
  decomposition (wrong for rows with entries after their ``-1``).
- ops whose C++ ``CompositeImplicitAutograd`` kernel computes output sizes as plain
  ints (``F.interpolate(x, scale_factor=2)``: ``upsample_nearest2d.vec``) run under
  torch's Python dispatcher, whose Python kernels keep them symbolic.

:func:`symbolic_calls` is entered around the code that runs on fake tensors (strict:
each recorded call, rewritten by :func:`call_rewritten`; trace: the traced function,
with the rewrites as a torch function mode) when the recorder has a ShapeEnv.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from ember.frontend._torch import (
    python_dispatcher,
    python_dispatcher_off,
    upsample_nearest_bindings,
)
from ember.runtime.checked_calls import call_checked
from torch.overrides import TorchFunctionMode

__all__ = ["SYMBOLIC_REWRITES", "SymbolicCalls", "call_rewritten", "symbolic_calls"]

_NUMBERS = (bool, int, float, torch.SymInt)


def _shape_and_items(data: Any) -> tuple[list[int], list[Any]] | None:
    """The nested shape and flat items of ``data`` (numbers, nested lists/tuples of
    one length per level), or None when it is anything else."""
    if isinstance(data, _NUMBERS):
        return [], [data]
    if not isinstance(data, (list, tuple)) or not data:
        return None
    parts = [_shape_and_items(d) for d in data]
    if any(p is None for p in parts):
        return None
    shapes = {tuple(p[0]) for p in parts if p is not None}
    if len(shapes) != 1:
        return None
    items = [item for p in parts if p is not None for item in p[1]]
    return [len(data), *shapes.pop()], items


def _inferred_dtype(items: list[Any]) -> torch.dtype:
    """``torch.tensor``'s dtype for these Python numbers."""
    if any(isinstance(v, float) for v in items):
        return torch.get_default_dtype()
    if all(type(v) is bool for v in items):
        return torch.bool
    return torch.int64


def _tensor(data: Any, *args: Any, **kwargs: Any) -> Any:
    """``torch.tensor(data, ...)`` / ``torch.as_tensor``, for data holding symbolic
    numbers (else NotImplemented: the call runs as it is)."""
    found = _shape_and_items(data)
    if args or found is None or not any(isinstance(v, torch.SymInt) for v in found[1]):
        return NotImplemented
    if kwargs.get("requires_grad") or kwargs.get("pin_memory"):
        return NotImplemented  # a new leaf that requires grad: refused where it matters
    if set(kwargs) - {"dtype", "device", "requires_grad", "pin_memory"}:
        return NotImplemented
    shape, items = found
    dtype = kwargs.get("dtype") or _inferred_dtype(items)
    device = kwargs.get("device")
    scalars = [torch.full((), v, dtype=dtype, device=device) for v in items]
    if not shape:
        return scalars[0]
    return torch.stack(scalars).reshape(shape) if math.prod(shape) else NotImplemented


def _one_hot(tensor: Any, num_classes: Any = -1) -> Any:
    """``F.one_hot(tensor, num_classes)`` for a symbolic ``num_classes``."""
    if not isinstance(num_classes, torch.SymInt) or not isinstance(tensor, torch.Tensor) \
            or tensor.dtype != torch.int64:
        return NotImplemented  # (the op's own errors for other index dtypes)
    out = torch.zeros((*tensor.shape, num_classes), dtype=torch.int64, device=tensor.device)
    return out.scatter_(-1, tensor.unsqueeze(-1), 1)


_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _multilabel_margin_loss(input: Any, target: Any, size_average: Any = None,
                            reduce: Any = None, reduction: str = "mean") -> Any:
    """``F.multilabel_margin_loss`` recorded as its aten op (the aot stage decomposes it
    correctly). Under the Python dispatcher torch runs its registered decomposition,
    which reads the slots after a row's first ``-1`` as class 0: a wrong loss whenever a
    row has entries after its ``-1``. (The legacy ``size_average``/``reduce`` flags
    map to a reduction as torch documents.)"""
    if size_average is not None or reduce is not None:
        average = True if size_average is None else bool(size_average)
        summed = True if reduce is None else bool(reduce)
        reduction = ("mean" if average else "sum") if summed else "none"
    if not isinstance(input, torch.Tensor) or reduction not in _REDUCTIONS:
        return NotImplemented  # (the function's own errors)
    with python_dispatcher_off():
        return torch.ops.aten.multilabel_margin_loss.default(input, target,
                                                             _REDUCTIONS[reduction])


def _upsample_nearest(op: Any) -> Callable[..., Any]:
    """``upsample_nearest{1,2,3}d(input, None, scale_factors)`` (what ``F.interpolate``
    calls for ``mode="nearest"`` and a ``scale_factor``) with symbolic spatial sizes and
    whole scales: the op's overload with explicit output sizes (``size * scale``, exact)
    and the same scales, from which it computes the source index as the ``.vec``
    overload does, recorded as itself. (torch's Python kernels of both overloads
    compute ``isize / (isize * scale)``, a symbolic float the IR does not hold.)"""

    def rewrite(input: Any, output_size: Any = None, scale_factors: Any = None) -> Any:
        if (output_size is not None or not scale_factors or not isinstance(input, torch.Tensor)
                or len(scale_factors) != input.dim() - 2):
            return NotImplemented
        spatial = list(input.shape[2:])
        if not any(isinstance(s, torch.SymInt) for s in spatial) or not all(
                float(f).is_integer() and f > 0 for f in scale_factors):
            return NotImplemented
        sizes = [s * int(f) for s, f in zip(spatial, scale_factors)]
        # NOTE: recorded as the op: its Python decomposition computes symbolic floats
        with python_dispatcher_off():
            return op(input, sizes, *[float(f) for f in scale_factors])

    return rewrite


_NEAREST = upsample_nearest_bindings()


def _interpolate(input: Any, size: Any = None, scale_factor: Any = None,
                 mode: str = "nearest", align_corners: Any = None,
                 recompute_scale_factor: Any = None, antialias: bool = False) -> Any:
    """``F.interpolate`` in ``"nearest"`` mode with a whole ``scale_factor``: the
    ``upsample_nearest`` rewrite above (the mode runs ``F.interpolate`` with itself
    off, so the call inside would not be seen)."""
    if (mode != "nearest" or size is not None or scale_factor is None or recompute_scale_factor
            or antialias or align_corners is not None or not isinstance(input, torch.Tensor)
            or input.dim() not in _NEAREST):
        return NotImplemented
    spatial = input.dim() - 2
    scales = (list(scale_factor) if isinstance(scale_factor, (list, tuple))
              else [scale_factor] * spatial)
    if len(scales) != spatial or not all(isinstance(f, (int, float)) for f in scales):
        return NotImplemented
    op = _NEAREST[input.dim()]
    return SYMBOLIC_REWRITES[op](input, None, [float(f) for f in scales])


SYMBOLIC_REWRITES: dict[Any, Callable[..., Any]] = {
    F.interpolate: _interpolate,
    torch.tensor: _tensor,
    torch.as_tensor: _tensor,
    F.one_hot: _one_hot,
    F.multilabel_margin_loss: _multilabel_margin_loss,
    _NEAREST[3]: _upsample_nearest(torch.ops.aten.upsample_nearest1d.default),
    _NEAREST[4]: _upsample_nearest(torch.ops.aten.upsample_nearest2d.default),
    _NEAREST[5]: _upsample_nearest(torch.ops.aten.upsample_nearest3d.default),
}
"""The torch functions rewritten when given symbolic numbers (NotImplemented: not)."""


class SymbolicCalls(TorchFunctionMode):
    """Runs :data:`SYMBOLIC_REWRITES` in place of the functions they stand for."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        rewrite = SYMBOLIC_REWRITES.get(func)
        if rewrite is not None:
            result = rewrite(*args, **kwargs)
            if result is not NotImplemented:
                return result
        return func(*args, **kwargs)


@contextlib.contextmanager
def symbolic_calls(shape_env: Any, mode: bool = True) -> Iterator[None]:
    """Inside: torch's Python dispatcher and (``mode``) the rewrites above as a torch
    function mode, when ``shape_env`` (the recorder's) is not None (a static capture is
    unchanged). Strict capture passes ``mode=False`` and applies :func:`call_rewritten`
    to each call it records: under a mode, ``torch.overrides.has_torch_function`` is
    True, which turns off torch's transformer fast paths."""
    if shape_env is None:
        yield
        return
    with contextlib.ExitStack() as stack:
        stack.enter_context(python_dispatcher())
        if mode:
            stack.enter_context(SymbolicCalls())
        yield


def call_rewritten(fn: Any, args: Any, kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` through its rewrite when it has one that applies (else
    through its checked version: ``ember.runtime.checked_calls``)."""
    rewrite = SYMBOLIC_REWRITES.get(fn) if _hashable(fn) else None
    if rewrite is not None:
        result = rewrite(*args, **kwargs)
        if result is not NotImplemented:
            return result
    return call_checked(fn, args, kwargs)


def _hashable(fn: Any) -> bool:
    try:
        hash(fn)
    except TypeError:
        return False
    return True
