"""Lowering rules that write a slice of a tensor into a copy of another (what
functionalization emits for mutated views): slice_scatter, select_scatter; and the
multi-result views split / unbind."""

from __future__ import annotations

from typing import Any

import torch
from ember.inductor.loop_ir import IndexExpr, add, floordiv
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.common import normalize_dim, out_meta, sizes_of
from ember.inductor.lowering.registry import NotLowerable, lowering
from ember.inductor.lowering.values import Lazy, TensorValue
from ember.inductor.lowering.views import _select, _slice, slice_start
from ember.runtime.ir import Node


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

