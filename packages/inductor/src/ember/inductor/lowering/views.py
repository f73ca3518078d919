"""Lowering rules for views: index arithmetic, never copies.

A view of a :class:`Stored` tensor is again ``Stored`` (new sizes, strides, offset)
whenever the view is affine in the buffer, so extern calls can receive it through
``as_strided`` without a copy; otherwise (a reshape that merges non-contiguous dims of a
computed value) the view is a :class:`Lazy` that maps its index back with
``//`` and ``%``.
"""

from __future__ import annotations

import dataclasses

from collections.abc import Sequence
from typing import Any

import sympy
from ember.inductor.loop_ir import IndexExpr, Int, Size, add, floordiv, mod, mul
from ember.inductor.loop_ir.index import as_index
from ember.inductor.loop_ir.symbolic_index import as_size, divides, provably_nonnegative
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.common import normalize_dim, sizes_of
from ember.inductor.lowering.layout import same_layout
from ember.inductor.lowering.registry import NotLowerable, lowering
from ember.inductor.lowering.values import (
    Lazy,
    Stored,
    TensorValue,
    contiguous_strides,
    numel,
)
from ember.runtime.ir import Node


def remap(x: TensorValue, sizes: Sequence[int], index_map: Any,
          strides: tuple[int, ...] | None = None, offset: int | None = None) -> TensorValue:
    """A view of ``x`` with ``sizes``: ``index_map(out_index) -> x_index`` for Lazy
    values; for Stored values ``strides``/``offset`` when given, else a Lazy."""
    sizes = tuple(sizes)
    if isinstance(x, Stored) and strides is not None and offset is not None:
        return Stored(x.buffer, x.dtype, sizes, strides, offset)
    src = x

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        return src.element(b, tuple(index_map(index)))

    return Lazy(fn, x.dtype, sizes)


def view_strides(old_sizes: Sequence[int], old_strides: Sequence[int],
                 new_sizes: Sequence[int]) -> tuple[int, ...] | None:
    """Strides that make ``new_sizes`` a view of a tensor with ``old_sizes``/
    ``old_strides`` without copying, or None when there are none.

    Old dims (size-1 dims dropped) form chunks of mutually contiguous dims; walking from
    the innermost, each chunk must be exactly covered by a run of new dims.
    """
    if 0 in old_sizes or 0 in new_sizes:
        return contiguous_strides(new_sizes)
    if not all(isinstance(s, int) for s in (*old_sizes, *old_strides, *new_sizes)):
        return symbolic_view_strides(old_sizes, old_strides, new_sizes)
    old = [(s, st) for s, st in zip(old_sizes, old_strides) if s != 1]
    new_strides = [1] * len(new_sizes)
    ni = len(new_sizes) - 1
    oi = len(old) - 1
    while oi >= 0:
        start = oi
        chunk_numel = old[oi][0]
        while start > 0 and old[start - 1][1] == old[start][0] * old[start][1]:
            start -= 1
            chunk_numel *= old[start][0]
        prod = 1
        acc = old[oi][1]
        while prod < chunk_numel:
            if ni < 0:
                return None
            new_strides[ni] = acc
            acc *= new_sizes[ni]
            prod *= new_sizes[ni]
            ni -= 1
        if prod != chunk_numel:
            return None
        oi = start - 1
    while ni >= 0:
        if new_sizes[ni] != 1:
            return None
        ni -= 1
    return tuple(new_strides)


def symbolic_view_strides(old_sizes: Sequence[Size], old_strides: Sequence[Size],
                          new_sizes: Sequence[Size]) -> tuple[Size, ...] | None:
    """:func:`view_strides` over symbolic sizes: the same chunk walk, where "the new
    dims so far cover less than the chunk" is "their product divides the chunk's and is
    not equal to it" (proved with sympy, for sizes at least 1), so a view that is not
    provably free is None (the caller then indexes through ``//`` and ``%``)."""
    old = [(sympy.sympify(s), sympy.sympify(st)) for s, st in zip(old_sizes, old_strides)
           if s != 1]
    new = [sympy.sympify(s) for s in new_sizes]
    new_strides: list[Size] = [1] * len(new)
    ni, oi = len(new) - 1, len(old) - 1
    while oi >= 0:
        start = oi
        chunk = old[oi][0]
        while start > 0 and sympy.expand(old[start - 1][1] - old[start][0] * old[start][1]) == 0:
            start -= 1
            chunk = chunk * old[start][0]
        prod: sympy.Expr = sympy.Integer(1)
        acc = old[oi][1]
        while sympy.expand(prod - chunk) != 0:
            if ni < 0 or not divides(prod, chunk):
                return None
            new_strides[ni] = as_size(acc)
            acc, prod = acc * new[ni], prod * new[ni]
            ni -= 1
        oi = start - 1
    while ni >= 0:
        if new[ni] != 1:
            return None
        ni -= 1
    return tuple(new_strides)


def reshape(x: TensorValue, new_sizes: Sequence[int]) -> TensorValue:
    """``x`` viewed with ``new_sizes`` (same number of elements)."""
    new_sizes = tuple(new_sizes)
    if isinstance(x, Stored):
        strides = view_strides(x.sizes, x.strides, new_sizes)
        if strides is not None:
            return Stored(x.buffer, x.dtype, new_sizes, strides, x.offset)
    old_sizes = x.sizes
    if numel(new_sizes) == 0:  # no element is ever read: any index will do
        return remap(x, new_sizes, lambda index: [Int(0)] * len(old_sizes))
    new_c = contiguous_strides(new_sizes)
    old_c = contiguous_strides(old_sizes)

    def index_map(index: tuple[IndexExpr, ...]) -> list[IndexExpr]:
        flat = add(*(mul(i, s) for i, s in zip(index, new_c)))
        out: list[IndexExpr] = []
        for size, stride in zip(old_sizes, old_c):
            out.append(Int(0) if size == 1 else mod(floordiv(flat, stride), size))
        return out

    result = remap(x, new_sizes, index_map)
    if isinstance(result, Lazy) and isinstance(x, Lazy):
        result = dataclasses.replace(result, reshaped_from=x)
    return result


def reshaped_bases(ctx: Any, value: Lazy, stored: Stored) -> list[tuple[Lazy, Stored]]:
    """The values ``value`` reshapes in row-major order (``Lazy.reshaped_from``, and what
    that reshapes), each as a view of ``stored``, ``value``'s new row-major buffer: the
    same elements in the same order. Their readers (the graph's outputs: a GELU that a
    matmul reads as ``view(-1, n)`` and the backward saves) then read that buffer instead
    of computing it again. Empty for a buffer in another layout; a base already stored,
    with sizes that are not static, or one whose readers want another layout
    (channels-last) ends the chain."""
    found: list[tuple[Lazy, Stored]] = []
    base = value.reshaped_from
    if not (all(isinstance(n, int) for n in value.sizes)
            and same_layout(value.sizes, stored.strides, contiguous_strides(value.sizes))):
        return found
    while (base is not None and not ctx.is_realized(base)
           and all(isinstance(s, int) for s in base.sizes)
           and _default(ctx, base) == contiguous_strides(base.sizes)):
        found.append((base, Stored(stored.buffer, stored.dtype, base.sizes,
                                   contiguous_strides(base.sizes), stored.offset)))
        base = base.reshaped_from
    return found


def _default(ctx: Any, value: Lazy) -> tuple[int, ...]:
    """The layout ``ctx.realize`` gives ``value`` when asked for none."""
    return tuple(ctx.layout.default_strides(
        value.sizes, lambda: {buffer for buffer, _ in ctx.external_loads(value)}))


@lowering("aten::view.default", "aten::_unsafe_view.default",
          "aten::view_copy.default")
def _view(ctx: Any, node: Node, x: TensorValue, size: Any) -> TensorValue:
    return reshape(x, sizes_of(node))


@lowering("aten::permute.default", "aten::permute_copy.default")
def _permute(ctx: Any, node: Node, x: TensorValue, dims: Sequence[int]) -> TensorValue:
    n = len(x.sizes)
    dims = [normalize_dim(d, n) for d in dims]
    sizes = [x.sizes[d] for d in dims]
    strides = offset = None
    if isinstance(x, Stored):
        strides, offset = tuple(x.strides[d] for d in dims), x.offset

    def index_map(index: tuple[IndexExpr, ...]) -> list[IndexExpr]:
        src: list[IndexExpr] = [Int(0)] * n
        for out_pos, d in enumerate(dims):
            src[d] = index[out_pos]
        return src

    result = remap(x, sizes, index_map, strides, offset)
    if isinstance(result, Lazy) and isinstance(x, Lazy):
        result = dataclasses.replace(result, permuted_from=(x, tuple(dims)))
    return result


@lowering("aten::t.default", "aten::transpose.int")
def _transpose(ctx: Any, node: Node, x: TensorValue, d0: int = 0, d1: int = 1) -> TensorValue:
    n = len(x.sizes)
    if n < 2:
        return x
    dims = list(range(n))
    a, c = normalize_dim(d0, n), normalize_dim(d1, n)
    dims[a], dims[c] = dims[c], dims[a]
    result: TensorValue = _permute(ctx, node, x, dims)
    return result


@lowering("aten::expand.default", "aten::expand_copy.default")
def _expand(ctx: Any, node: Node, x: TensorValue, size: Any, *, implicit: bool = False) -> TensorValue:
    sizes = sizes_of(node)
    k = len(x.sizes)
    lead = len(sizes) - k
    strides = offset = None
    if isinstance(x, Stored):
        strides = tuple([0] * lead + [
            0 if (xs == 1 and s != 1) else st
            for xs, s, st in zip(x.sizes, sizes[lead:], x.strides)])
        offset = x.offset

    def index_map(index: tuple[IndexExpr, ...]) -> list[IndexExpr]:
        return [Int(0) if xs == 1 else i for xs, i in zip(x.sizes, index[lead:])]

    return remap(x, sizes, index_map, strides, offset)


@lowering("aten::repeat.default")
def _repeat(ctx: Any, node: Node, x: TensorValue, repeats: Any) -> TensorValue:
    """``x`` tiled ``repeats`` times along each dim (repeats beyond ``x``'s dims add
    leading dims): output position ``i`` of a dim of size ``n`` reads ``x`` at ``i % n``."""
    sizes = sizes_of(node)
    lead = len(sizes) - len(x.sizes)

    def index_map(index: tuple[IndexExpr, ...]) -> list[IndexExpr]:
        return [Int(0) if xs in (0, 1) else mod(i, xs)
                for xs, i in zip(x.sizes, index[lead:])]

    return remap(x, sizes, index_map)


def slice_start(start: Size | None, size: Size) -> Size:
    """The first position a slice from ``start`` takes in a dim of ``size`` (a negative
    start counts from the end; clamped to ``[0, size]``). Symbolic: a start that is
    provably non-negative, or provably negative with a non-negative ``start + size``;
    the clamp at ``size`` is left out (the slice's sizes come from the traced meta).

    Raises:
        NotLowerable: a symbolic start of unknown sign.
    """
    begin = 0 if start is None else start
    if isinstance(begin, int) and isinstance(size, int):
        return min(max(begin + size if begin < 0 else begin, 0), size)
    expr = sympy.sympify(begin)
    if provably_nonnegative(expr):
        return as_size(expr)
    if provably_nonnegative(-expr - 1) and provably_nonnegative(expr + size):
        return as_size(expr + size)
    raise NotLowerable(f"symbolic sizes: slice start {start} of unknown sign")


@lowering("aten::slice.Tensor", "aten::slice_copy.Tensor")
def _slice(ctx: Any, node: Node, x: TensorValue, dim: int = 0, start: Any = None,
           end: Any = None, step: int = 1) -> TensorValue:
    d = normalize_dim(dim, len(x.sizes))
    begin = slice_start(start, x.sizes[d])
    sizes = sizes_of(node)
    strides = offset = None
    if isinstance(x, Stored):
        st = list(x.strides)
        offset = x.offset + begin * st[d]
        st[d] *= step
        strides = tuple(st)

    def index_map(index: tuple[IndexExpr, ...]) -> list[IndexExpr]:
        src = list(index)
        src[d] = add(begin, mul(index[d], step))
        return src

    return remap(x, sizes, index_map, strides, offset)


@lowering("aten::select.int", "aten::select_copy.int")
def _select(ctx: Any, node: Node, x: TensorValue, dim: int, i: int) -> TensorValue:
    d = normalize_dim(dim, len(x.sizes))
    if isinstance(i, int) and i < 0:
        i += x.sizes[d]  # a symbolic size: x[:, -1] selects s1 - 1
    sizes = sizes_of(node)
    strides = offset = None
    if isinstance(x, Stored):
        offset = x.offset + i * x.strides[d]
        strides = x.strides[:d] + x.strides[d + 1:]
    position = as_index(i)  # Int, or Sym when symbolic

    def index_map(index: tuple[IndexExpr, ...]) -> list[IndexExpr]:
        return list(index[:d]) + [position] + list(index[d:])

    return remap(x, sizes, index_map, strides, offset)


@lowering("aten::squeeze.dim", "aten::squeeze.dims", "aten::squeeze.default",
          "aten::unsqueeze.default", "aten::squeeze_copy.dims", "aten::unsqueeze_copy.default")
def _squeeze_unsqueeze(ctx: Any, node: Node, x: TensorValue, *args: Any) -> TensorValue:
    sizes = sizes_of(node)
    return reshape(x, sizes)


@lowering("aten::unfold.default")
def _unfold(ctx: Any, node: Node, x: TensorValue, dim: int, size: int, step: int
            ) -> TensorValue:
    """Windows of ``size`` elements every ``step`` along ``dim``, as a new last dim."""
    n = len(x.sizes)
    d = normalize_dim(dim, n)
    sizes = sizes_of(node)
    strides = offset = None
    if isinstance(x, Stored):
        st = x.strides[d] if n else 1
        strides = (*x.strides[:d], st * step, *x.strides[d + 1:], st)
        offset = x.offset

    def index_map(index: tuple[IndexExpr, ...]) -> list[IndexExpr]:
        if not n:  # a 0-d input: one window of its one element
            return []
        src = list(index[:n])
        src[d] = add(mul(index[d], step), index[n])
        return src

    return remap(x, sizes, index_map, strides, offset)


@lowering("aten::diagonal.default")
def _diagonal(ctx: Any, node: Node, x: TensorValue, offset: int = 0, dim1: int = 0,
              dim2: int = 1) -> TensorValue:
    """The elements ``(i, i + offset)`` of dims ``dim1``, ``dim2``, as a new last dim."""
    n = len(x.sizes)
    d1, d2 = normalize_dim(dim1, n), normalize_dim(dim2, n)
    row, col = (0, offset) if offset >= 0 else (-offset, 0)
    sizes = sizes_of(node)
    rest = [d for d in range(n) if d not in (d1, d2)]
    strides = start = None
    if isinstance(x, Stored):
        strides = (*(x.strides[d] for d in rest), x.strides[d1] + x.strides[d2])
        start = x.offset + (row * x.strides[d1] + col * x.strides[d2] if sizes[-1] else 0)

    def index_map(index: tuple[IndexExpr, ...]) -> list[IndexExpr]:
        src: list[IndexExpr] = [Int(0)] * n
        for pos, d in enumerate(rest):
            src[d] = index[pos]
        src[d1], src[d2] = add(index[-1], row), add(index[-1], col)
        return src

    return remap(x, sizes, index_map, strides, start)


@lowering("aten::as_strided.default", "aten::as_strided_copy.default")
def _as_strided(ctx: Any, node: Node, x: TensorValue, size: Any, stride: Any,
                storage_offset: Any = None) -> TensorValue:
    if any(not isinstance(s, int) for s in tuple(size) + tuple(stride)):
        raise NotLowerable("symbolic sizes: as_strided")
    base: Stored = x if isinstance(x, Stored) else ctx.realize(x)
    if storage_offset is None:
        offset = base.offset
    else:
        offset = int(storage_offset) - ctx.storage_offset_of(base)
    return Stored(base.buffer, base.dtype, tuple(size), tuple(stride), offset)
