"""Adaptive average pooling over 2 or 3 spatial dims: ``_adaptive_avg_pool2d``,
``_adaptive_avg_pool3d`` and their backward ops.

Output position o of a dim of size n pooled to m averages the input positions
``[o*n // m, ((o+1)*n + m-1) // m)``: windows of varying size, at most
:func:`adaptive_span` ``(n, m)``. The forward unrolls the largest window, masked past
each position's own; the backward is an accumulating scatter over (output position,
window element in each dim). Static sizes only, and at most :data:`MAX_WINDOW` unrolled
elements; other calls run as counted extern calls.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

import torch
from ember.inductor.loop_ir import IndexExpr, Int, add, floordiv, mul
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.common import compute_dtype, out_meta, sizes_of
from ember.inductor.lowering.pooling.window import (
    MAX_WINDOW,
    Ints,
    check_input,
    load_inside,
    product,
    spatial,
)
from ember.inductor.lowering.registry import NotLowerable, lowering
from ember.inductor.lowering.scatter import add_into_zeros
from ember.inductor.lowering.values import Lazy, Stored, TensorValue
from ember.runtime.ir import Node

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering


def adaptive_span(n: int, m: int) -> int:
    """The largest window adaptive pooling from size ``n`` to ``m`` averages."""
    return max(((o + 1) * n + m - 1) // m - o * n // m for o in range(m))


def _sizes(x: TensorValue, output_size: Any, dims: int) -> tuple[Ints, Ints, Ints]:
    """``(plane, out, spans)``: the input's and the output's spatial sizes and the
    largest window in each dim, static, with the unrolled window within
    :data:`MAX_WINDOW`.

    Raises:
        NotLowerable: symbolic sizes, or a window too large to unroll.
    """
    plane = tuple(x.sizes[-dims:])
    out = spatial(output_size, dims)
    if not all(type(v) is int and v > 0 for v in (*plane, *out)):
        raise NotLowerable(f"adaptive pooling of {x.sizes} to {output_size}: symbolic or "
                           "empty sizes")
    spans = tuple(adaptive_span(n, m) for n, m in zip(plane, out))
    if math.prod(spans) > MAX_WINDOW:
        raise NotLowerable(f"adaptive pooling window of {plane} to {out} larger than "
                           f"{MAX_WINDOW} elements")
    return plane, out, spans


def _bounds(out: IndexExpr, n: int, m: int) -> tuple[IndexExpr, IndexExpr]:
    """The window ``[start, end)`` of output position ``out`` (index expressions)."""
    return floordiv(mul(out, n), m), floordiv(add(mul(out, n), n + m - 1), m)


def _window(b: BodyBuilder, out: tuple[IndexExpr, ...], plane: Ints, sizes: Ints
            ) -> tuple[tuple[IndexExpr, ...], tuple[IndexExpr, ...], str]:
    """The starts and ends of output position ``out``'s window in each dim, and its
    element count (an int64 value)."""
    bounds = [_bounds(o, n, m) for o, n, m in zip(out, plane, sizes)]
    count = product(b, *(b.compute("sub", b.index_value(end), b.index_value(start))
                         for start, end in bounds))
    return tuple(start for start, _ in bounds), tuple(end for _, end in bounds), count


def _inside(b: BodyBuilder, pos: tuple[IndexExpr, ...], ends: tuple[IndexExpr, ...]
            ) -> str | None:
    """Whether ``pos`` lies before each dim's window end (the start is the first); None
    where it surely does (a constant position before a constant end)."""
    conds = []
    for p, end in zip(pos, ends):
        if isinstance(p, Int) and isinstance(end, Int):
            if p.value >= end.value:
                return b.literal(False, torch.bool)
        else:
            conds.append(b.compute("lt", b.index_value(p), b.index_value(end)))
    return b.all_of(*conds) if conds else None


def adaptive_avg_pool(ctx: GraphLowering, node: Node, dims: int, x: TensorValue,
                      output_size: Any) -> Lazy:
    """Adaptive average pooling of ``x`` over its last ``dims`` dims."""
    check_input(x, dims)
    plane, out_sizes, spans = _sizes(x, output_size, dims)
    meta = out_meta(node)
    ct = compute_dtype(meta.dtype)

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        starts, ends, count = _window(b, index[-dims:], plane, out_sizes)
        total = b.literal(0, ct)
        for at in itertools.product(*(range(s) for s in spans)):
            pos = tuple(add(start, k) for start, k in zip(starts, at))
            mask = _inside(b, pos, ends)
            v = load_inside(b, x, index[:-dims], pos, mask, ct)
            total = b.compute("add", total, v if mask is None else b.compute(
                "where", mask, v, b.literal(0, ct)))
        return b.cast(b.compute("truediv", total, b.cast(count, ct)), meta.dtype)

    return Lazy(fn, meta.dtype, sizes_of(node))


@lowering("aten::_adaptive_avg_pool2d.default")
def _adaptive_avg_pool2d(ctx: GraphLowering, node: Node, x: TensorValue,
                         output_size: Any) -> Lazy:
    return adaptive_avg_pool(ctx, node, 2, x, output_size)


@lowering("aten::_adaptive_avg_pool3d.default")
def _adaptive_avg_pool3d(ctx: GraphLowering, node: Node, x: TensorValue,
                         output_size: Any) -> Lazy:
    return adaptive_avg_pool(ctx, node, 3, x, output_size)


def adaptive_avg_pool_backward(ctx: GraphLowering, node: Node, dims: int, grad: TensorValue,
                               x: TensorValue) -> Stored:
    """The gradient of ``x``: each output gradient over its window's count, added to
    every input position of its window."""
    check_input(x, dims)
    plane, out_sizes, spans = _sizes(x, tuple(grad.sizes[-dims:]), dims)
    meta = out_meta(node)
    ct = compute_dtype(meta.dtype)
    n = len(grad.sizes)

    # the scatter runs over (output position, window element in each dim)
    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> tuple[tuple[IndexExpr, ...], str,
                                                               str | None]:
        out, at = i[:n], i[n:]
        starts, ends, count = _window(b, out[-dims:], plane, out_sizes)
        pos = tuple(add(start, k) for start, k in zip(starts, at))
        share = b.compute("truediv", b.cast(grad.element(b, out), ct), b.cast(count, ct))
        return (*out[:-dims], *pos), share, _inside(b, pos, ends)

    return add_into_zeros(ctx, node, x, (*grad.sizes, *spans), fn)


@lowering("aten::_adaptive_avg_pool2d_backward.default")
def _adaptive_avg_pool2d_backward(ctx: GraphLowering, node: Node, grad: TensorValue,
                                  x: TensorValue) -> Stored:
    return adaptive_avg_pool_backward(ctx, node, 2, grad, x)


@lowering("aten::_adaptive_avg_pool3d_backward.default")
def _adaptive_avg_pool3d_backward(ctx: GraphLowering, node: Node, grad: TensorValue,
                                  x: TensorValue) -> Stored:
    return adaptive_avg_pool_backward(ctx, node, 3, grad, x)
