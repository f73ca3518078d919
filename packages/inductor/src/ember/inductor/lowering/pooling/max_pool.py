"""Max pooling over 2 or 3 spatial dims: ``max_pool2d_with_indices``,
``max_pool3d_with_indices`` and their backward ops.

The forward is two element functions over the output: the max alone (a chain of
NaN-propagating ``maximum``s, which vectorizes) and the argmax as eager records it (the
flat index into the input's spatial dims, ``D*H*W`` in 3-d). The backward gathers
(:mod:`.covering`): each input position sums the gradients of the windows containing it
that recorded it as their argmax; a dilated window's backward is an accumulating scatter
of each output gradient into the recorded argmax.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from ember.inductor.loop_ir import IndexExpr, Indirect, add, mul
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.common import compute_dtype, out_meta, sizes_of
from ember.inductor.lowering.pooling.covering import (
    covering_windows,
    gather_windows,
    gathered_input,
)
from ember.inductor.lowering.pooling.window import (
    MAX_REREAD_OPS,
    Position,
    Window,
    check_input,
    flat_position,
    inside,
    load_inside,
    make_window,
    ops,
    window_input,
)
from ember.inductor.lowering.registry import lowering
from ember.inductor.lowering.scatter import add_into_zeros
from ember.inductor.lowering.values import Lazy, TensorValue, numel
from ember.runtime.ir import Node, ValueRef

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering

# Whether a gathered gradient is stored by a kernel of its own (True) or left to fuse
# into the kernels that read it (a ReLU's and a batch norm's backward: its split
# reduction and its pointwise pass each recompute it, and the reduction's programs then
# wait on the argmax loads). Stored measured faster: torchvision ResNet-18's bf16
# training step (batch 256) took 19.55 ms stored, 20.10 fused and 21.64 scattered, one
# process on an H100 (``tools/gpu/ab_matmul_choice.py`` variants
# ``ember_pool_gather_stored`` and ``ember_pool_scatter``; docs/benchmarks.md).
STORE_GATHERED = True


def _reads_indices(ctx: GraphLowering, node: Node) -> bool:
    """Whether a consumer reads the argmax result of pooling ``node`` (training). Its
    kernel, values and argmax chains over one computed input (a relu), stayed scalar
    (GCC 12: "no vectype" for the shared strided loads; 19 against 2 ms in SqueezeNet's
    backward, which recomputes its first pool): such an input is stored first."""
    def refers(a: Any) -> bool:
        if isinstance(a, ValueRef):
            return a.node == node.name and a.index == 1
        return isinstance(a, (tuple, list)) and any(refers(v) for v in a)
    return any(refers(tuple(u.args)) for u in ctx.uses.users(node.name))


def _first_position(b: BodyBuilder, window: Window, out: Position,
                    plane: tuple[Any, ...]) -> str:
    """The flat index eager reports for a window wholly in the padding: its start in
    each dim, moved forward by the dilation until it is not negative."""
    i64 = torch.int64
    flat: str | None = None
    for o, s, p, d, size in zip(out, window.stride, window.padding, window.dilation, plane):
        start = add(mul(o, s), -p)
        steps = -(-p // d)  # the start is at least -p
        pos = b.index_value(add(start, steps * d))
        for k in range(steps - 1, -1, -1):
            candidate = b.index_value(add(start, k * d))
            pos = b.compute("where", b.compute("ge", candidate, b.literal(0, i64)),
                            candidate, pos)
        flat = pos if flat is None else b.compute(
            "add", b.compute("mul", flat, b.literal(size, i64)), pos)
    assert flat is not None
    return flat


def max_pool(ctx: GraphLowering, node: Node, dims: int, x: TensorValue, kernel_size: Any,
             stride: Any, padding: Any, dilation: Any) -> tuple[Lazy, Lazy]:
    """``(values, indices)`` of max pooling ``x`` over its last ``dims`` dims.
    (``ceil_mode`` only changes the output's sizes, which the node's meta gives.)"""
    check_input(x, dims)
    window = make_window(dims, kernel_size, stride, padding, dilation)
    x = window_input(ctx, x, window, 0 if _reads_indices(ctx, node) else MAX_REREAD_OPS)
    plane = tuple(x.sizes[-dims:])
    ct = compute_dtype(x.dtype)
    sizes = sizes_of(node, 0)
    out_plane = sizes[-dims:]

    def elements(b: BodyBuilder, index: tuple[IndexExpr, ...]
                 ) -> list[tuple[Position, str | None, str]]:
        """``(position, mask, value)`` of each window element of output ``index``."""
        found = []
        for at, pos in window.positions(index[-dims:]):
            if window.never_inside(at, out_plane, plane):
                continue
            checks = window.checks(at, out_plane, plane)
            pos, checks = window.neighbour(at, pos, checks, out_plane, plane)
            mask = inside(b, pos, plane, checks)
            found.append((pos, mask, load_inside(b, x, index[:-dims], pos, mask, ct)))
        return found

    def argmax(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        """The flat argmax like eager: the first strictly larger value wins, a NaN
        always wins, an all -inf window reports its first valid position, a window
        wholly in the padding :func:`_first_position`."""
        best = b.literal(float("-inf"), ct)
        where_ = _first_position(b, window, index[-dims:], plane)
        first = b.literal(False, torch.bool)
        seen: str | None = first  # None: a position surely inside was seen
        for pos, mask, v in elements(b, index):
            flat = b.index_value(flat_position(pos, plane))
            take: str | None = None  # None: always (the window's first position, inside)
            if seen is None or seen != first:
                take = b.compute("logical_or", b.compute("gt", v, best), b.compute("isnan", v))
                if seen is not None:
                    take = b.compute("logical_or", take, b.compute("logical_not", seen))
            if mask is not None:
                take = mask if take is None else b.compute("logical_and", mask, take)
            best = v if take is None else b.compute("where", take, v, best)
            where_ = flat if take is None else b.compute("where", take, flat, where_)
            if mask is None:
                seen = None
            elif seen is not None:
                seen = b.compute("logical_or", seen, mask)
        return where_

    def maximum(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        """The max alone (no argmax to track: inference): a NaN wins, padding is -inf;
        two operations a window position, which vectorize."""
        best = b.literal(float("-inf"), ct)
        for _, mask, v in elements(b, index):
            best = b.compute("maximum", best,
                             v if mask is None else b.compute("where", mask, v, best))
        return best

    dtype = out_meta(node, 0).dtype
    values = Lazy(lambda b, i: b.cast(maximum(b, i), dtype), dtype, sizes)
    indices = Lazy(argmax, torch.int64, sizes)
    return values, indices


@lowering("aten::max_pool2d_with_indices.default")
def _max_pool2d(ctx: GraphLowering, node: Node, x: TensorValue, kernel_size: Any,
                stride: Any = (), padding: Any = 0, dilation: Any = 1,
                ceil_mode: bool = False) -> tuple[Lazy, Lazy]:
    return max_pool(ctx, node, 2, x, kernel_size, stride, padding, dilation)


@lowering("aten::max_pool3d_with_indices.default")
def _max_pool3d(ctx: GraphLowering, node: Node, x: TensorValue, kernel_size: Any,
                stride: Any = (), padding: Any = 0, dilation: Any = 1,
                ceil_mode: bool = False) -> tuple[Lazy, Lazy]:
    return max_pool(ctx, node, 3, x, kernel_size, stride, padding, dilation)


def max_pool_backward(ctx: GraphLowering, node: Node, dims: int, grad: TensorValue,
                      x: TensorValue, indices: TensorValue, window: Window) -> TensorValue:
    """The gradient of ``x``: each output gradient added at its recorded argmax (an
    index outside the input's spatial dims adds nothing). Gathered where the window
    allows it (:mod:`.covering`): each input position sums the gradients of the windows
    containing it whose argmax it is; else scattered into zeros."""
    check_input(x, dims)
    plane = tuple(x.sizes[-dims:])
    i64 = torch.int64
    candidates = gather_windows(window, ctx.device.type, out_meta(node))
    limit = MAX_REREAD_OPS if candidates is None else 0
    if isinstance(indices, Lazy) and ops(indices) > limit:
        # recomputed from the forward's input (the partitioner saves the input, not the
        # indices): computed in a vectorized kernel of its own, not inside the scatter,
        # whose loop runs sequentially (SqueezeNet's first pool: 16 against 2 ms), nor
        # once for each window a gathering position reads
        indices = ctx.realize(indices)
    argmax = indices
    if candidates is not None:
        return _gathered(ctx, node, dims, grad, x, argmax, window, candidates)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> tuple[tuple[IndexExpr, ...], str,
                                                               str | None]:
        flat = b.cast(argmax.element(b, i), i64)
        rest, coords = flat, []
        for size in reversed(plane[1:]):
            n = b.literal(size, i64)
            coords.append(Indirect(b.compute("remainder", rest, n)))
            rest = b.compute("floordiv", rest, n)
        coords.append(Indirect(rest))
        ok = b.all_of(b.compute("ge", flat, b.literal(0, i64)),
                      b.compute("lt", flat, b.literal(numel(plane), i64)))
        return (*i[:-dims], *reversed(coords)), grad.element(b, i), ok

    return add_into_zeros(ctx, node, x, grad.sizes, fn)


def _gathered(ctx: GraphLowering, node: Node, dims: int, grad: TensorValue, x: TensorValue,
              argmax: TensorValue, window: Window, candidates: int) -> TensorValue:
    """The gather form of :func:`max_pool_backward` (``candidates`` windows a position)."""
    meta = out_meta(node)
    ct = compute_dtype(meta.dtype)
    i64 = torch.int64
    plane = tuple(x.sizes[-dims:])
    out_plane = tuple(grad.sizes[-dims:])
    grad = gathered_input(ctx, grad, candidates)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        lead, pos = i[:-dims], i[-dims:]
        flat = b.index_value(flat_position(pos, plane))
        total = b.literal(0, ct)
        for out, mask in covering_windows(b, window, pos, plane, out_plane):
            recorded = b.cast(load_inside(b, argmax, lead, out, mask, i64), i64)
            hit = b.compute("eq", recorded, flat)
            if mask is not None:
                hit = b.compute("logical_and", mask, hit)
            g = load_inside(b, grad, lead, out, mask, ct)
            total = b.compute("add", total, b.compute("where", hit, g, b.literal(0, ct)))
        return b.cast(total, meta.dtype)

    gathered = Lazy(fn, meta.dtype, tuple(x.sizes))
    return ctx.realize(gathered) if STORE_GATHERED else gathered


@lowering("aten::max_pool2d_with_indices_backward.default")
def _max_pool2d_backward(ctx: GraphLowering, node: Node, grad: TensorValue, x: TensorValue,
                         kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                         ceil_mode: bool, indices: TensorValue) -> TensorValue:
    return max_pool_backward(ctx, node, 2, grad, x, indices,
                             make_window(2, kernel_size, stride, padding, dilation))


@lowering("aten::max_pool3d_with_indices_backward.default")
def _max_pool3d_backward(ctx: GraphLowering, node: Node, grad: TensorValue, x: TensorValue,
                         kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                         ceil_mode: bool, indices: TensorValue) -> TensorValue:
    return max_pool_backward(ctx, node, 3, grad, x, indices,
                             make_window(3, kernel_size, stride, padding, dilation))
