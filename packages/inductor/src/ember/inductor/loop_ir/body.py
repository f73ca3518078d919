"""Kernel bodies: straight-line SSA statements over loop variables.

A kernel body is a tuple of statements; each statement except :class:`Store` defines a
value named ``name`` (unique in the kernel) of dtype ``dtype``. Arguments of statements
are value names. The statement types are a closed set:

``Load``        read ``buffer[index]`` (``index`` an :mod:`~ember.inductor.loop_ir.index`
                expression, in elements from the buffer's data pointer). With ``mask`` (a
                bool value) the load happens only where the mask is true, else the value
                is ``other`` (used by cat, constant_pad_nd and bounds-checked indexing).
``Literal``     a scalar constant (``float('inf')``/``nan`` allowed for floats).
``IndexValue``  the value of an index expression as an int64 (arange, iota, masks
                built from positions).
``Compute``     a pointwise operation ``op`` from :data:`POINTWISE_OPS` on ``args``
                (the op table: :mod:`.ops`).
``Reduce``      reduce the inner value ``arg`` over all of the kernel's reduction ranges
                with ``op`` from :data:`REDUCTION_OPS`; the result is an outer value.
``Store``       write ``value`` to ``buffer[index]``; with ``mask`` only where the mask is
                true; with ``mode="add"`` add ``value`` to the element instead (a
                scatter's accumulation: indirect indexes may repeat, so the codegens
                make the read-modify-write safe, sequential in C++, atomic in Triton).

Type rules (the lowering guarantees them, codegens may rely on them):

- all ``args`` of a ``Compute`` have the same dtype, except ``where`` (``args[0]`` is
  bool) and ``cast`` (any dtype to ``dtype``);
- comparisons, ``logical_*``, ``isnan``/``isinf`` produce bool; ``rand``/``randn``
  produce float32 from int64 arguments (below); every other op produces the dtype of its
  (value) arguments;
- ``rand(key, offset)`` / ``randn(key, offset)`` (both int64) are counter-based random
  numbers: Philox 4x32-10 keyed on ``key`` (low 32 bits, high 32 bits) with counter
  ``(lo32(offset), hi32(offset), 0, 0)``, as Triton's ``tl.rand``/``tl.randn`` define
  them. ``rand`` is uniform in [0, 1) from the first output word; ``randn`` is standard
  normal (Box-Muller on the first two words). Pure functions of their arguments: equal
  arguments give equal values on every backend (``rand`` bit for bit; ``randn`` up to
  the backend's ``log``/``cos``), so CSE and recomputation are safe. The result is
  always float32; other float dtypes are casts of it;
- float16 / bfloat16 arithmetic is never emitted: the lowering casts to float32 to
  compute and back to the storage dtype at stores, as eager's kernels do internally
  (only ``where``, a pure selection, and ``cast`` may take float16/bfloat16 operands);
- integer ``floordiv`` / ``remainder`` follow Python (floor) semantics, ``truncdiv`` /
  ``fmod`` follow C (truncation); ``maximum``/``minimum`` propagate NaN like torch;
- ``argmax``/``argmin`` return the int64 row-major position over the reduction ranges
  of the first extreme element (NaN counts as the maximum, like torch);
- ``m2`` (floats) returns the sum of squared deviations from the mean of the reduced
  values, in one pass (Welford); of one element it is 0 (NaN for a NaN or infinity),
  of none 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from ember.inductor.loop_ir.index import IndexExpr
from ember.inductor.loop_ir.ops import BOOL_RESULT_OPS, COSTLY_OPS, POINTWISE_OPS, REDUCTION_OPS

Scalar = bool | int | float


@dataclass(frozen=True)
class Load:
    """``name = buffer[index]`` (where ``mask`` is true, else ``other``)."""

    name: str
    buffer: str
    index: IndexExpr
    dtype: torch.dtype
    mask: str | None = None
    other: Scalar = 0


@dataclass(frozen=True)
class Literal:
    """``name = value`` as ``dtype``."""

    name: str
    value: Scalar
    dtype: torch.dtype


@dataclass(frozen=True)
class IndexValue:
    """``name = index`` as an int64 value."""

    name: str
    index: IndexExpr
    dtype: torch.dtype = torch.int64


@dataclass(frozen=True)
class Compute:
    """``name = op(*args)``."""

    name: str
    op: str
    args: tuple[str, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class Reduce:
    """``name = op over the reduction ranges of arg`` (an outer value).

    With ``across``, over the kernel's *outer* ranges instead: a column sum inside a row
    kernel (a norm's weight gradient beside its input gradient, :mod:`ember.inductor.mixed`).
    Its result varies with the reduction variables only, and only statements over the
    reduction variables read it (a backend runs them after every row is done)."""

    name: str
    op: str
    arg: str
    dtype: torch.dtype
    across: bool = False


@dataclass(frozen=True)
class Store:
    """``buffer[index] = value`` (``+= value`` when ``mode == "add"``), where ``mask``."""

    buffer: str
    index: IndexExpr
    value: str
    mask: str | None = None
    mode: str = "store"


Stmt = Load | Literal | IndexValue | Compute | Reduce | Store
ValueStmt = Load | Literal | IndexValue | Compute | Reduce


__all__ = [
    "BOOL_RESULT_OPS", "COSTLY_OPS", "POINTWISE_OPS", "REDUCTION_OPS", "Compute", "IndexValue",
    "Literal", "Load", "Reduce", "Scalar", "Stmt", "Store", "ValueStmt", "stmt_inputs",
]


def stmt_inputs(s: Stmt) -> tuple[str, ...]:
    """The value names statement ``s`` reads (arguments, masks, indirect indices)."""
    from ember.inductor.loop_ir.index import indirect_values

    if isinstance(s, Load):
        ind = tuple(indirect_values(s.index))
        return ind + ((s.mask,) if s.mask is not None else ())
    if isinstance(s, IndexValue):
        return tuple(indirect_values(s.index))
    if isinstance(s, Compute):
        return s.args
    if isinstance(s, Reduce):
        return (s.arg,)
    if isinstance(s, Store):
        mask = (s.mask,) if s.mask is not None else ()
        return (s.value,) + tuple(indirect_values(s.index)) + mask
    return ()
