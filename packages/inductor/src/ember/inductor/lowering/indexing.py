"""Lowering rules that select elements: cat, constant_pad_nd, flip, gather,
index_select, embedding and advanced indexing (``index.Tensor``). Concatenation and
padding use masked loads; gathers use indirect loads (``Indirect`` index expressions)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from ember.inductor.loop_ir import IndexExpr, Indirect, add, mul
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.common import broadcast_index, normalize_dim, out_meta, sizes_of
from ember.inductor.lowering.registry import NotLowerable, lowering
from ember.inductor.lowering.values import Lazy, TensorValue
from ember.runtime.ir import Node


def _in_range(b: BodyBuilder, i: IndexExpr, lo: int, hi: int) -> str:
    """A bool value: ``lo <= i < hi``."""
    v = b.index_value(i)
    conds = []
    if lo > 0:
        conds.append(b.compute("ge", v, b.literal(lo, torch.int64)))
    conds.append(b.compute("lt", v, b.literal(hi, torch.int64)))
    return b.all_of(*conds)


@lowering("aten::cat.default")
def _cat(ctx: Any, node: Node, tensors: Sequence[Any], dim: int = 0) -> Lazy:
    meta = out_meta(node)
    sizes = sizes_of(node)
    parts = [t for t in tensors if not (len(t.sizes) == 1 and t.sizes[0] == 0)]
    d = normalize_dim(dim, len(sizes))
    offsets = []
    acc = 0
    for t in parts:
        offsets.append(acc)
        acc += t.sizes[d]

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        result: str | None = None
        # Build from the last part backwards: where(in part k, part k, rest)
        for t, off in reversed(list(zip(parts, offsets))):
            src = list(index)
            src[d] = add(index[d], -off)
            if result is None:
                with b.masked(_in_range(b, index[d], off, off + t.sizes[d])):
                    result = b.cast(t.element(b, tuple(src)), meta.dtype)
                continue
            cond = _in_range(b, index[d], off, off + t.sizes[d])
            with b.masked(cond):
                v = b.cast(t.element(b, tuple(src)), meta.dtype)
            result = b.compute("where", cond, v, result)
        assert result is not None
        return result

    if not parts:
        raise NotLowerable("cat of empty tensors")
    return Lazy(fn, meta.dtype, sizes)


@lowering("aten::constant_pad_nd.default")
def _pad(ctx: Any, node: Node, x: TensorValue, pad: Sequence[int], value: Any = 0) -> Lazy:
    meta = out_meta(node)
    sizes = sizes_of(node)
    n = len(sizes)
    # pad lists (before, after) pairs starting from the last dim
    before = [0] * n
    for k in range(len(pad) // 2):
        before[n - 1 - k] = pad[2 * k]

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        src = [add(i, -p) for i, p in zip(index, before)]
        conds = [
            _in_range(b, i, p, p + s)
            for i, p, s, out in zip(index, before, x.sizes, sizes)
            if p > 0 or p + s < out
        ]
        if not conds:
            return x.element(b, tuple(src))
        cond = b.all_of(*conds)
        with b.masked(cond):
            v = x.element(b, tuple(src))
        return b.compute("where", cond, v, b.literal(value, meta.dtype))

    return Lazy(fn, meta.dtype, sizes)


@lowering("aten::flip.default")
def _flip(ctx: Any, node: Node, x: TensorValue, dims: Sequence[int]) -> Lazy:
    n = len(x.sizes)
    ds = {normalize_dim(d, n) for d in dims}

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        src = tuple(add(x.sizes[k] - 1, mul(i, -1)) if k in ds else i
                    for k, i in enumerate(index))
        return x.element(b, src)

    return Lazy(fn, x.dtype, x.sizes)


def _wrapped_index(b: BodyBuilder, idx_value: str, size: int) -> IndexExpr:
    """An Indirect index from an integer value, negative values wrapped by ``size``.

    NOTE: an index out of range (which eager reports with an IndexError) is clamped into
    the tensor, so generated code never reads outside its buffers.
    """
    i64 = torch.int64
    v = b.cast(idx_value, i64)
    neg = b.compute("lt", v, b.literal(0, i64))
    wrapped = b.compute("where", neg, b.compute("add", v, b.literal(size, i64)), v)
    clamped = b.compute("minimum", b.compute("maximum", wrapped, b.literal(0, i64)),
                        b.literal(size - 1, i64))
    return Indirect(clamped)


@lowering("aten::gather.default")
def _gather(ctx: Any, node: Node, x: TensorValue, dim: int, index: TensorValue,
            *, sparse_grad: bool = False) -> Lazy:
    d = normalize_dim(dim, len(x.sizes))
    meta = out_meta(node)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        src = list(i)
        src[d] = _wrapped_index(b, index.element(b, i), x.sizes[d])
        return x.element(b, tuple(src))

    return Lazy(fn, meta.dtype, sizes_of(node))


@lowering("aten::index_select.default")
def _index_select(ctx: Any, node: Node, x: TensorValue, dim: int, index: TensorValue) -> Lazy:
    d = normalize_dim(dim, len(x.sizes))

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        src = list(i)
        k = index.element(b, (i[d],) if index.sizes else ())
        src[d] = _wrapped_index(b, k, x.sizes[d])
        return x.element(b, tuple(src))

    return Lazy(fn, x.dtype, sizes_of(node))


@lowering("aten::embedding.default")
def _embedding(ctx: Any, node: Node, weight: TensorValue, indices: TensorValue,
               *args: Any) -> Lazy:
    k = len(indices.sizes)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        row = _wrapped_index(b, indices.element(b, i[:k]), weight.sizes[0])
        return weight.element(b, (row,) + tuple(i[k:]))

    return Lazy(fn, weight.dtype, sizes_of(node))


@lowering("aten::index.Tensor")
def _index(ctx: Any, node: Node, x: TensorValue, indices: Sequence[Any]) -> Lazy:
    n = len(x.sizes)
    idx = list(indices) + [None] * (n - len(indices))
    present = [k for k, t in enumerate(idx) if t is not None]
    if not present:
        raise NotLowerable("index without tensors")
    if any(t.dtype == torch.bool for t in idx if t is not None):
        raise NotLowerable("boolean mask indexing (data-dependent shape)")
    bshape = broadcast_shape([idx[k].sizes for k in present])
    nb = len(bshape)
    adjacent = present == list(range(present[0], present[-1] + 1))
    first = present[0] if adjacent else 0
    sizes = sizes_of(node)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        bidx = i[first:first + nb]
        rest = list(i[:first]) + list(i[first + nb:])
        src: list[IndexExpr] = []
        r = iter(rest)
        for k in range(n):
            t = idx[k]
            if t is None:
                src.append(next(r))
            else:
                v = t.element(b, broadcast_index(t.sizes, bidx))
                src.append(_wrapped_index(b, v, x.sizes[k]))
        return x.element(b, tuple(src))

    return Lazy(fn, x.dtype, sizes)


def broadcast_shape(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    n = max(len(s) for s in shapes)
    out = [1] * n
    for s in shapes:
        for k, size in enumerate(s):
            pos = n - len(s) + k
            if size != 1:
                if out[pos] not in (1, size):
                    raise NotLowerable(f"index shapes {shapes} do not broadcast")
                out[pos] = size
    return tuple(out)
