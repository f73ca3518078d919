"""Lowering rules that write a slice of a tensor into a copy of another (what
functionalization emits for mutated views): slice_scatter, select_scatter,
as_strided_scatter; the multi-result views split / unbind; and :func:`add_into_zeros`,
the gradient of a gather-like op (pooling, grid sampling) as a scatter-add."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from ember.inductor.loop_ir import IndexExpr, add, floordiv, mod, mul
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.common import normalize_dim, out_meta, sizes_of
from ember.inductor.lowering.registry import NotLowerable, lowering
from ember.inductor.lowering.values import Lazy, Stored, TensorValue, contiguous_strides
from ember.inductor.lowering.views import _select, _slice, slice_start
from ember.runtime.ir import Node, TensorMeta

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering, PositionFn


def add_into_zeros(ctx: GraphLowering, node: Node, like: TensorValue, over: Sequence[Any],
                   fn: PositionFn) -> Stored:
    """``node``'s result, shaped like ``like``: zeros, with the value ``fn`` gives at each
    index over ``over`` added at the position it names (:meth:`GraphLowering.scatter`,
    accumulating)."""
    meta = out_meta(node)
    zeros = Lazy(lambda b, i: b.literal(0, meta.dtype), meta.dtype, like.sizes)
    return ctx.scatter(node, zeros, over, fn, accumulate=True)


@lowering("aten::slice_scatter.default")
def _slice_scatter(ctx: Any, node: Node, x: TensorValue, src: TensorValue, dim: int = 0,
                   start: Any = None, end: Any = None, step: int = 1) -> Lazy:
    meta = out_meta(node)
    d = normalize_dim(dim, len(x.sizes))
    lo = slice_start(start, x.sizes[d])
    n = src.sizes[d]
    if step < 1:
        raise NotLowerable("slice_scatter with step < 1")

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        i = b.index_value(index[d])
        rel = b.compute("sub", i, b.literal(lo, torch.int64))
        conds = [b.compute("ge", rel, b.literal(0, torch.int64)),
                 b.compute("lt", rel, b.literal(n * step, torch.int64))]
        if step != 1:
            conds.append(b.compute("eq", b.compute("remainder", rel, b.literal(
                step, torch.int64)), b.literal(0, torch.int64)))
        cond = b.all_of(*conds)
        src_index = list(index)
        # NOTE: only read where cond holds, so the (lo, step) affine inverse is exact
        src_index[d] = floordiv(add(index[d], -lo), step)
        with b.masked(cond):
            v = b.cast(src.element(b, tuple(src_index)), meta.dtype)
        return b.compute("where", cond, v, b.cast(x.element(b, index), meta.dtype))

    return Lazy(fn, meta.dtype, sizes_of(node))


@lowering("aten::select_scatter.default")
def _select_scatter(ctx: Any, node: Node, x: TensorValue, src: TensorValue, dim: int,
                    index_: int) -> Lazy:
    meta = out_meta(node)
    d = normalize_dim(dim, len(x.sizes))
    k = index_ + x.sizes[d] if index_ < 0 else index_

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        cond = b.compute("eq", b.index_value(index[d]), b.literal(k, torch.int64))
        with b.masked(cond):
            v = b.cast(src.element(b, index[:d] + index[d + 1:]), meta.dtype)
        return b.compute("where", cond, v, b.cast(x.element(b, index), meta.dtype))

    return Lazy(fn, meta.dtype, sizes_of(node))


@lowering("aten::as_strided_scatter.default")
def _as_strided_scatter(ctx: Any, node: Node, x: TensorValue, src: TensorValue, size: Any,
                        stride: Any, storage_offset: Any = None) -> Stored:
    """A copy of ``x`` with ``src`` written through ``x.as_strided(size, stride,
    storage_offset)``. Eager addresses ``x``'s storage as it lies in memory; lowered
    values have no fixed memory, so only an ``x`` that is row-major at offset 0 (as
    the aot stage's write-backs are) has a meaning here: its storage index is its
    row-major element index."""
    meta, base = out_meta(node), node.args[0]
    view = tuple(size) + tuple(stride)
    if any(not isinstance(v, int) for v in view + tuple(x.sizes)) or not isinstance(
            storage_offset, (int, type(None))):
        raise NotLowerable("symbolic sizes: as_strided_scatter")
    in_meta = ctx.traced_meta(base)
    if in_meta is None or in_meta.storage_offset != 0 or not _row_major(in_meta):
        raise NotLowerable("as_strided_scatter into a tensor not row-major at offset 0")
    offset = storage_offset or 0
    numel = 1
    for s in x.sizes:
        numel *= s
    if any(s < 0 for s in stride) or (all(s > 0 for s in size) and offset + sum(
            (n - 1) * st for n, st in zip(size, stride)) >= numel):
        raise NotLowerable("as_strided_scatter view outside its input")
    row_major = contiguous_strides(x.sizes)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> tuple[tuple[IndexExpr, ...], str, None]:
        flat = add(offset, *[mul(k, st) for k, st in zip(i, stride)])
        position = tuple(mod(floordiv(flat, st), n) if d else floordiv(flat, st)
                         for d, (n, st) in enumerate(zip(x.sizes, row_major)))
        return position, b.cast(src.element(b, i), meta.dtype), None

    result: Stored = ctx.scatter(node, x, tuple(size), fn, False)
    return result


def _row_major(meta: TensorMeta) -> bool:
    expected = 1
    for n, st in reversed(list(zip(meta.sizes, meta.strides))):
        if not isinstance(n, int) or (n != 1 and st != expected):
            return False
        expected *= n
    return True


@lowering("aten::split.Tensor", "aten::split_with_sizes.default")
def _split(ctx: Any, node: Node, x: TensorValue, sizes: Any, dim: int = 0) -> tuple[Any, ...]:
    d = normalize_dim(dim, len(x.sizes))
    metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
    results = []
    start = 0
    for i, _ in enumerate(metas):
        length = sizes_of(node, i)[d]
        sub = Node(node.name, node.op, node.target, meta=metas[i])
        results.append(_slice(ctx, sub, x, d, start, start + length, 1))
        start += length
    return tuple(results)


@lowering("aten::unbind.int")
def _unbind(ctx: Any, node: Node, x: TensorValue, dim: int = 0) -> tuple[Any, ...]:
    d = normalize_dim(dim, len(x.sizes))
    metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
    return tuple(_select(ctx, Node(node.name, node.op, node.target, meta=m), x, d, i)
                 for i, m in enumerate(metas))

