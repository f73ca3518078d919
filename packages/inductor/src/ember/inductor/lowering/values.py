"""How the lowering represents tensors: stored in a buffer, or computed on demand.

- :class:`Stored` — a strided view of a buffer the wrapper holds (a graph input, a
  kernel output, an extern result). Views of it (permute, slice, expand, affine reshape)
  are again ``Stored`` with other sizes/strides/offset: index arithmetic, no copy.
- :class:`Lazy` — a function ``fn(builder, index) -> value name`` that computes one
  element; pointwise ops, non-affine views, cat and pad produce these. Consumers inline
  them, which is what fuses pointwise chains; the graph lowering *realizes* a Lazy into a
  buffer only where a value must exist in memory (graph outputs, extern inputs).
- :class:`ScalarValue` — a Python number known only at run time (an extern's scalar
  result); the wrapper holds it in a variable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from ember.inductor.loop_ir import IndexExpr, Int, Size, Var, add, mul
from ember.inductor.loop_ir.symbolic_index import as_size
from ember.inductor.lowering.builder import BodyBuilder

ElementFn = Callable[[BodyBuilder, tuple[IndexExpr, ...]], str]


@dataclass(frozen=True)
class Stored:
    """``buffer`` viewed with ``sizes``/``strides``/``offset`` (elements, from the
    buffer's data pointer)."""

    buffer: str
    dtype: torch.dtype
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    def element(self, b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        return b.load(self.buffer, self.flat_index(index), self.dtype)

    def flat_index(self, index: Sequence[IndexExpr]) -> IndexExpr:
        return add(self.offset, *(mul(i, s) for i, s in zip(index, self.strides) if s != 0))


@dataclass(frozen=True, eq=False)
class Lazy:
    """A tensor computed element by element by ``fn``."""

    fn: ElementFn
    dtype: torch.dtype
    sizes: tuple[int, ...]
    # NOTE: what probe() found, computed once: the inlining heuristics, the lowering's
    # load queries and the matmul template's prologue probe the same value (read only)
    _probed: list[BodyBuilder] = field(default_factory=list, init=False, repr=False,
                                       compare=False)
    #: ``(base, dims)`` when this is ``base.permute(dims)`` (a matmul operand that is
    #: the transpose of a value computed anyway is read as a view of it)
    permuted_from: tuple[Lazy, tuple[int, ...]] | None = field(default=None, repr=False,
                                                                compare=False)
    #: the value this reshapes in row-major order (``base.view(sizes)``): once this is
    #: stored row-major, the base is a view of its buffer (``views.reshaped_bases``)
    reshaped_from: Lazy | None = field(default=None, repr=False, compare=False)

    def element(self, b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        # NOTE: a value computed under a mask (its loads give `other` outside it) must
        # not be reused where that mask does not hold; one computed unmasked is valid
        # under any mask.
        mask = b.current_mask
        key = (id(self), index, mask)
        found = b.memo.get(key)
        if found is None and mask is not None:
            found = b.memo.get((id(self), index, None))
        if found is None:
            found = self.fn(b, index)
            b.memo[key] = found
            # NOTE: keep self alive while memoized so id() is not reused
            b.memo[(id(self), "ref")] = self  # type: ignore[assignment]
        return found


@dataclass(frozen=True)
class ScalarValue:
    """A run-time Python scalar held by the wrapper variable ``name``."""

    name: str


TensorValue = Stored | Lazy
Value = Stored | Lazy | ScalarValue


def probe_index(sizes: Sequence[int]) -> tuple[IndexExpr, ...]:
    """Symbolic loop variables ``x0, x1, ...`` over ``sizes`` (a size-1 dim: 0)."""
    return tuple(Var(f"x{i}", s) if s != 1 else Int(0) for i, s in enumerate(sizes))


def probe(value: Lazy) -> BodyBuilder:
    """A builder holding one element of ``value`` at :func:`probe_index`: what computing
    it loads, and through which indexes, and how much code it takes. Computed once per
    value: the result is shared, callers only read it."""
    if not value._probed:
        b = BodyBuilder()
        value.element(b, probe_index(value.sizes))
        value._probed.append(b)
    return value._probed[0]


def contiguous_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides of ``sizes``."""
    strides: list[int] = []
    acc = 1
    for s in reversed(sizes):
        strides.append(acc)
        # NOTE: symbolic strides are expanded like every loop-IR size, so that equal
        # strides compare equal (layout tests compare them with ==)
        acc = acc * max(s, 1) if isinstance(s, int) else as_size(acc * s)
    return tuple(reversed(strides))


def numel(sizes: Sequence[Size]) -> Size:
    """The number of elements of ``sizes`` (an expanded expression when symbolic, so
    that equal counts compare equal)."""
    n: Size = 1
    for s in sizes:
        n *= s
    return n if isinstance(n, int) else as_size(n)
