"""Average pooling over 2 or 3 spatial dims: ``avg_pool2d``, ``avg_pool3d`` and their
backward ops.

The forward is an element function over the output: the window's sum (padding adds
nothing) divided as eager divides (:func:`_divisor`). The backward gathers
(:mod:`.covering`): each input position sums the gradients of the windows containing it,
each divided likewise; where ``covering.GATHER_LAYOUTS`` does not gather (a CPU's
contiguous gradients) it is an accumulating scatter over (output position, window
element).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from ember.inductor.loop_ir import IndexExpr, add, mul
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.common import compute_dtype, out_meta, sizes_of
from ember.inductor.lowering.pooling.covering import (
    covering_windows,
    gather_windows,
    gathered_input,
)
from ember.inductor.lowering.pooling.window import (
    Position,
    Window,
    check_input,
    inside,
    load_inside,
    make_window,
    product,
    window_input,
)
from ember.inductor.lowering.registry import lowering
from ember.inductor.lowering.scatter import add_into_zeros
from ember.inductor.lowering.values import Lazy, TensorValue
from ember.runtime.ir import Node

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering


class _AvgPool(NamedTuple):
    window: Window
    count_include_pad: bool
    divisor_override: int | None


def _params(dims: int, kernel_size: Any, stride: Any, padding: Any,
            count_include_pad: bool, divisor_override: int | None) -> _AvgPool:
    # NOTE: ceil_mode only changes the output size, which the node's meta gives
    return _AvgPool(make_window(dims, kernel_size, stride, padding), count_include_pad,
                    divisor_override)


def _divisor(b: BodyBuilder, p: _AvgPool, out: Position, plane: tuple[Any, ...],
             dtype: torch.dtype) -> str:
    """The divisor of output position ``out``, as eager computes it: the window clipped
    to the padded input (``count_include_pad``) or to the input itself, in each dim."""
    if p.divisor_override:
        return b.literal(p.divisor_override, dtype)
    i64 = torch.int64
    counts = []
    for pos, k, s, pad, size in zip(out, p.window.kernel, p.window.stride, p.window.padding,
                                    plane):
        start = b.index_value(add(mul(pos, s), -pad))
        end = b.compute("minimum", b.compute("add", start, b.literal(k, i64)),
                        b.literal(size + pad, i64))
        if not p.count_include_pad:
            start = b.compute("maximum", start, b.literal(0, i64))
            end = b.compute("minimum", end, b.literal(size, i64))
        counts.append(b.compute("sub", end, start))
    return b.cast(product(b, *counts), dtype)


def avg_pool(ctx: GraphLowering, node: Node, dims: int, x: TensorValue,
             p: _AvgPool) -> Lazy:
    """Average pooling of ``x`` over its last ``dims`` dims."""
    check_input(x, dims)
    x = window_input(ctx, x, p.window)
    plane = tuple(x.sizes[-dims:])
    meta = out_meta(node)
    ct = compute_dtype(meta.dtype)
    out_plane = sizes_of(node)[-dims:]

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        total = b.literal(0, ct)
        out = index[-dims:]
        for at, pos in p.window.positions(out):
            if p.window.never_inside(at, out_plane, plane):
                continue
            mask = inside(b, pos, plane, p.window.checks(at, out_plane, plane))
            v = load_inside(b, x, index[:-dims], pos, mask, ct)
            total = b.compute("add", total, v if mask is None else b.compute(
                "where", mask, v, b.literal(0, ct)))
        divided = b.compute("truediv", total, _divisor(b, p, out, plane, ct))
        return b.cast(divided, meta.dtype)

    return Lazy(fn, meta.dtype, sizes_of(node))


@lowering("aten::avg_pool2d.default")
def _avg_pool2d(ctx: GraphLowering, node: Node, x: TensorValue, kernel_size: Any,
                stride: Any = (), padding: Any = 0, ceil_mode: bool = False,
                count_include_pad: bool = True, divisor_override: int | None = None) -> Lazy:
    return avg_pool(ctx, node, 2, x, _params(2, kernel_size, stride, padding,
                                             count_include_pad, divisor_override))


@lowering("aten::avg_pool3d.default")
def _avg_pool3d(ctx: GraphLowering, node: Node, x: TensorValue, kernel_size: Any,
                stride: Any = (), padding: Any = 0, ceil_mode: bool = False,
                count_include_pad: bool = True, divisor_override: int | None = None) -> Lazy:
    return avg_pool(ctx, node, 3, x, _params(3, kernel_size, stride, padding,
                                             count_include_pad, divisor_override))


def avg_pool_backward(ctx: GraphLowering, node: Node, dims: int, grad: TensorValue,
                      x: TensorValue, p: _AvgPool) -> TensorValue:
    """The gradient of ``x``: each output gradient, divided as the forward divides,
    added to every input position of its window (module doc)."""
    check_input(x, dims)
    meta = out_meta(node)
    plane = tuple(x.sizes[-dims:])
    ct = compute_dtype(meta.dtype)
    n = len(grad.sizes)
    candidates = gather_windows(p.window, ctx.device.type, out_meta(node))
    if candidates is not None:
        out_plane = tuple(grad.sizes[-dims:])
        grad = gathered_input(ctx, grad, candidates)

        def gathered(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
            total = b.literal(0, ct)
            for out, mask in covering_windows(b, p.window, i[-dims:], plane, out_plane):
                g = load_inside(b, grad, i[:-dims], out, mask, ct)
                share = b.compute("truediv", g, _divisor(b, p, out, plane, ct))
                total = b.compute("add", total, share if mask is None else b.compute(
                    "where", mask, share, b.literal(0, ct)))
            return b.cast(total, meta.dtype)

        return Lazy(gathered, meta.dtype, tuple(x.sizes))

    # the scatter runs over (output position, window element in each dim)
    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> tuple[tuple[IndexExpr, ...], str,
                                                               str | None]:
        out, at = i[:n], i[n:]
        pos = tuple(add(mul(o, s), w, -pad) for o, w, s, pad in zip(
            out[-dims:], at, p.window.stride, p.window.padding))
        g = b.cast(grad.element(b, out), ct)
        share = b.compute("truediv", g, _divisor(b, p, out[-dims:], plane, ct))
        return (*out[:-dims], *pos), share, inside(b, pos, plane)

    return add_into_zeros(ctx, node, x, (*grad.sizes, *p.window.kernel), fn)


@lowering("aten::avg_pool2d_backward.default")
def _avg_pool2d_backward(ctx: GraphLowering, node: Node, grad: TensorValue, x: TensorValue,
                         kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool,
                         count_include_pad: bool, divisor_override: int | None) -> TensorValue:
    return avg_pool_backward(ctx, node, 2, grad, x, _params(
        2, kernel_size, stride, padding, count_include_pad, divisor_override))


@lowering("aten::avg_pool3d_backward.default")
def _avg_pool3d_backward(ctx: GraphLowering, node: Node, grad: TensorValue, x: TensorValue,
                         kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool,
                         count_include_pad: bool, divisor_override: int | None) -> TensorValue:
    return avg_pool_backward(ctx, node, 3, grad, x, _params(
        3, kernel_size, stride, padding, count_include_pad, divisor_override))
