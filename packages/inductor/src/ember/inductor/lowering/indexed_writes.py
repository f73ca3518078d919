"""Lowering rules that write through run-time indexes: index_put, scatter, scatter_add,
scatter_reduce (sum) and index_add.

Each result is a copy of ``self`` followed by a scatter (see
:meth:`~.graph_lowering.GraphLowering.scatter`): a kernel over the *updates* (the
values, the index tensor or the source) that stores, or with accumulation adds, each
update at the position its index gives. index_put's negative indexes count from the
end, as in eager; scatter and index_add take none. An index out of range writes nothing
(generated code never writes outside its buffers) and fails a run-time check, so the
wrapper raises what eager raises (``_EXCEPTIONS``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from ember.inductor.codegen.registry import backend_for
from ember.inductor.loop_ir import IndexExpr, Indirect
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.common import broadcast_index, compute_dtype, normalize_dim, out_meta
from ember.inductor.lowering.checks import RuntimeCheck, record_failure
from ember.inductor.lowering.indexing import bounds_check, broadcast_shape
from ember.inductor.lowering.registry import NotLowerable, lowering
from ember.inductor.lowering.value_ranges import tensor_range, value_range
from ember.inductor.lowering.values import Lazy, Stored, TensorValue
from ember.runtime.ir import Node

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering

# Bounds checks (``checks.py``), as eager on CPU: index_put takes negative indexes
# (counting from the end) and raises IndexError; scatter, scatter_add,
# scatter_reduce and index_add take indexes in [0, size) and raise RuntimeError.
_EXCEPTIONS = {"aten::index_put.default": "IndexError"}

def _position(ctx: GraphLowering, b: BodyBuilder, check: RuntimeCheck | None, index_value: str,
              size: int, wrap: bool = False) -> tuple[IndexExpr, str | None]:
    """The position ``index_value`` names in a dim of ``size`` (with ``wrap``, negative
    values count from the end), and a bool value: whether it lies in the dim (None when
    that is known at compile time). Out of range, the kernel records ``check`` as failed
    and writes nothing; the wrapper then raises."""
    i64 = torch.int64
    known = value_range(ctx, b, index_value)
    wrapped = v = b.cast(index_value, i64)
    if wrap and (known is None or known[0] < 0):
        neg = b.compute("lt", v, b.literal(0, i64))
        wrapped = b.compute("where", neg, b.compute("add", v, b.literal(size, i64)), v)
    lowest = -size if wrap else 0
    if known is not None and known[0] >= lowest and known[1] < size:
        return Indirect(wrapped), None
    inside = b.all_of(b.compute("ge", wrapped, b.literal(0, i64)),
                      b.compute("lt", wrapped, b.literal(size, i64)))
    if check is not None:
        record_failure(b, check, b.compute("logical_not", inside), v)
    return Indirect(wrapped), inside


def _bounds_check(ctx: GraphLowering, node: Node, dim: int, size: int, index: TensorValue,
                  wrap: bool = False) -> RuntimeCheck | None:
    """The run-time check of ``index`` in a dim of ``size``; None when its values are
    known to lie inside at compile time."""
    known = tensor_range(ctx, index)
    if known is not None and (-size if wrap else 0) <= known[0] and known[1] < size:
        return None
    return bounds_check(ctx, node.target, dim, size, _EXCEPTIONS.get(node.target, "RuntimeError"))


def _check_accumulate(ctx: GraphLowering, dtype: torch.dtype) -> None:
    if dtype == torch.bool:
        raise NotLowerable("accumulating scatter of bool")
    # every dtype in C++ (a sequential loop); in Triton, those with atomic adds
    if not backend_for(ctx.device.type).supports_atomic_add(dtype):
        raise NotLowerable(f"no atomic add for {dtype} on {ctx.device.type}")


@lowering("aten::index_put.default")
def _index_put(ctx: GraphLowering, node: Node, x: TensorValue, indices: Sequence[Any],
               values: TensorValue, accumulate: bool = False) -> Stored:
    meta = out_meta(node)
    n = len(x.sizes)
    idx = list(indices) + [None] * (n - len(indices))
    present = [k for k, t in enumerate(idx) if t is not None]
    if not present:
        raise NotLowerable("index_put without index tensors")
    if any(idx[k].dtype == torch.bool for k in present):
        raise NotLowerable("boolean mask index_put (data-dependent positions)")
    if accumulate:
        _check_accumulate(ctx, meta.dtype)
    bshape = broadcast_shape([idx[k].sizes for k in present])
    nb = len(bshape)
    # the updates are laid out like x[indices]: the broadcast index dims replace the
    # indexed dims when those are adjacent, else they come first
    adjacent = present == list(range(present[0], present[-1] + 1))
    first = present[0] if adjacent else 0
    rest_sizes = [s for k, s in enumerate(x.sizes) if k not in present]
    sizes = tuple(rest_sizes[:first]) + bshape + tuple(rest_sizes[first:])
    if len(values.sizes) > len(sizes):
        raise NotLowerable(f"values of {values.sizes} for updates of {sizes}")

    checks = {k: _bounds_check(ctx, node, k, x.sizes[k], idx[k], wrap=True) for k in present}

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> tuple[tuple[IndexExpr, ...], str,
                                                               str | None]:
        bidx = i[first:first + nb]
        rest = iter(list(i[:first]) + list(i[first + nb:]))
        position: list[IndexExpr] = []
        conds = []
        for k in range(n):
            t = idx[k]
            if t is None:
                position.append(next(rest))
                continue
            p, inside = _position(ctx, b, checks[k], t.element(b, broadcast_index(t.sizes, bidx)),
                                  x.sizes[k], wrap=True)
            position.append(p)
            if inside is not None:
                conds.append(inside)
        value = values.element(b, broadcast_index(values.sizes, i))
        return tuple(position), value, b.all_of(*conds) if conds else None

    return ctx.scatter(node, x, sizes, fn, accumulate)


#: the dtypes a scatter_add sums in float32, then rounds once (eager's CPU kernel does:
#: 3000 ones into one bfloat16 element are 3008, not 256 as one rounding per add gives)
WIDENED_SCATTER_SUMS = (torch.bfloat16, torch.float16)


def _scatter_along(ctx: GraphLowering, node: Node, x: TensorValue, dim: int, index: TensorValue,
                   src: TensorValue | bool | float, accumulate: bool) -> TensorValue:
    """``result[..., index[i], ...] (=|+=) src[i]`` along ``dim`` for every ``i`` over
    ``index``'s sizes (scatter, scatter_add)."""
    meta = out_meta(node)
    if accumulate and meta.dtype in WIDENED_SCATTER_SUMS:
        wide = Node(node.name, node.op, node.target, meta=dataclasses.replace(
            meta, dtype=torch.float32))
        summed = _scatter_along(ctx, wide, x, dim, index, src, accumulate)
        return Lazy(lambda b, i: b.cast(summed.element(b, i), meta.dtype), meta.dtype,
                    summed.sizes)
    if accumulate:
        _check_accumulate(ctx, meta.dtype)
    scalar = not x.sizes  # a 0-dim tensor scatters as one element along dim 0 (or -1)
    d = normalize_dim(dim, max(len(x.sizes), 1))
    if len(index.sizes) != len(x.sizes):
        raise NotLowerable(f"scatter index of {len(index.sizes)} dims into {len(x.sizes)}")
    extent = 1 if scalar else x.sizes[d]
    check = _bounds_check(ctx, node, d, extent, index)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> tuple[tuple[IndexExpr, ...], str,
                                                               str | None]:
        position = list(i)
        at, inside = _position(ctx, b, check, index.element(b, i), extent)
        if not scalar:
            position[d] = at
        if isinstance(src, (Stored, Lazy)):
            value = b.cast(src.element(b, i), meta.dtype)
        else:
            value = b.literal(src, meta.dtype)
        return tuple(position), value, inside

    return ctx.scatter(node, x, index.sizes, fn, accumulate)


@lowering("aten::scatter.src", "aten::scatter.value")
def _scatter(ctx: GraphLowering, node: Node, x: TensorValue, dim: int, index: TensorValue,
             src: Any) -> TensorValue:
    return _scatter_along(ctx, node, x, dim, index, src, accumulate=False)


@lowering("aten::scatter_add.default")
def _scatter_add(ctx: GraphLowering, node: Node, x: TensorValue, dim: int, index: TensorValue,
                 src: TensorValue) -> TensorValue:
    return _scatter_along(ctx, node, x, dim, index, src, accumulate=True)


@lowering("aten::scatter.reduce", "aten::scatter.value_reduce")
def _scatter_reduce_legacy(ctx: GraphLowering, node: Node, x: TensorValue, dim: int,
                           index: TensorValue, src: Any, *, reduce: str) -> TensorValue:
    if reduce != "add":
        raise NotLowerable(f"scatter with reduce={reduce!r}")
    return _scatter_along(ctx, node, x, dim, index, src, accumulate=True)


@lowering("aten::scatter_reduce.two")
def _scatter_reduce(ctx: GraphLowering, node: Node, x: TensorValue, dim: int, index: TensorValue,
                    src: TensorValue, reduce: str, *, include_self: bool = True) -> TensorValue:
    if reduce != "sum" or not include_self:
        raise NotLowerable(f"scatter_reduce with reduce={reduce!r}, "
                           f"include_self={include_self}")
    return _scatter_along(ctx, node, x, dim, index, src, accumulate=True)


@lowering("aten::index_add.default")
def _index_add(ctx: GraphLowering, node: Node, x: TensorValue, dim: int, index: TensorValue,
               source: TensorValue, *, alpha: Any = 1) -> Stored:
    meta = out_meta(node)
    _check_accumulate(ctx, meta.dtype)
    d = normalize_dim(dim, len(x.sizes))
    if len(source.sizes) != len(x.sizes) or len(index.sizes) > 1:
        raise NotLowerable("index_add of a source with other dims than self")
    check = _bounds_check(ctx, node, d, x.sizes[d], index)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> tuple[tuple[IndexExpr, ...], str,
                                                               str | None]:
        position = list(i)
        k = index.element(b, (i[d],) if index.sizes else ())
        position[d], inside = _position(ctx, b, check, k, x.sizes[d])
        value = source.element(b, i)
        if alpha != 1:
            ct = compute_dtype(meta.dtype)
            value = b.compute("mul", b.cast(value, ct), b.literal(alpha, ct))
        return tuple(position), value, inside

    return ctx.scatter(node, x, source.sizes, fn, accumulate=True)
