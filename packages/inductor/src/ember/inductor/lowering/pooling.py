"""Lowering rules for 2-d pooling: max_pool2d_with_indices, avg_pool2d,
_adaptive_avg_pool2d and their backward ops.

The forward ops are element functions over the output with the window unrolled (at most
:data:`MAX_WINDOW` loads, masked at the padding), so they fuse with their producer and
consumers like any pointwise op. The backward ops are scatters (see
:meth:`~.graph_lowering.GraphLowering.scatter`): each output gradient is added into the
input position(s) it came from: the recorded argmax for max pooling, every position of
its window for average pooling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from ember.inductor.loop_ir import Compute, IndexExpr, Indirect, add, floordiv, mul
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.common import compute_dtype, out_meta, sizes_of
from ember.inductor.lowering.registry import NotLowerable, lowering
from ember.inductor.lowering.values import Lazy, Stored, TensorValue, probe
from ember.runtime.ir import Node, ValueRef

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering

# The largest window unrolled into an element function (7 x 7 and below: every common
# pooling layer).
MAX_WINDOW = 64

# A computed input that overlapping windows read (a 3x3 window of stride 2 reads each
# element 2.25 times on average) is stored first when one element of it takes more than
# this many operations: inlined, a batch norm's ``sub, add, sqrt, div, mul, mul, add,
# relu`` ran once a window position, masked at the padding and unvectorized
# (torchvision ResNet-18's stem: 19 ms of a 68 ms call, one thread). A cheap producer
# (a relu) stays inlined: recomputing it costs less than a store and a load.
MAX_REREAD_OPS = 3


class Window(NamedTuple):
    """One pooling layer's geometry over the last two dims (height, width)."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]

    def positions(self, out: tuple[IndexExpr, IndexExpr]
                  ) -> list[tuple[tuple[int, int], IndexExpr, IndexExpr]]:
        """``((i, j), row, col)`` for every window element of output position ``out``,
        in eager's order (rows, then columns)."""
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self
        found = []
        for i in range(kh):
            for j in range(kw):
                row = add(mul(out[0], sh), i * dh - ph)
                col = add(mul(out[1], sw), j * dw - pw)
                found.append(((i, j), row, col))
        return found

    def checks(self, at: tuple[int, int], out: Sequence[Any], plane: Sequence[Any]
               ) -> tuple[bool, bool, bool, bool]:
        """Which of ``row >= 0, row < height, col >= 0, col < width`` window element
        ``at`` can fail for some output position (``out``: the output's sizes over the
        plane, ``plane``: the input's). A check that holds for every position is not
        emitted: without padding the window's loads need no mask (they vectorize)."""
        needed = []
        for k, n, size, s, p, d in zip(at, out, plane, self.stride, self.padding,
                                       self.dilation):
            first = k * d - p
            static = type(n) is int and type(size) is int
            needed += [first < 0, not (static and (n - 1) * s + first < size)]
        return needed[0], needed[1], needed[2], needed[3]

    def neighbour(self, at: tuple[int, int], pos: tuple[IndexExpr, IndexExpr],
                  needed: tuple[bool, bool, bool, bool], out: Sequence[Any],
                  plane: Sequence[Any]) -> tuple[IndexExpr, IndexExpr,
                                                 tuple[bool, bool, bool, bool]]:
        """A window element at most one step outside the plane read at its neighbour in
        the same window instead (``p + 1 - (p + n) // n`` maps -1 to 0 and n to n - 1):
        a max does not change with a value read twice, nor does eager's argmax (the
        copies of a row or column come just before or after it, in its order), and
        the load needs no mask: GCC 12 does not vectorize masked strided loads (ResNet's
        padded stem pool, SqueezeNet's ceil-mode pools). Returns the positions and the
        checks still needed."""
        new_pos, left = list(pos), list(needed)
        for a in (0, 1):
            k, n, size = at[a], out[a], plane[a]
            first = k * self.dilation[a] - self.padding[a]
            if not (left[2 * a] or left[2 * a + 1]) or self.dilation[a] != 1 or not (
                    type(n) is int and type(size) is int and first >= -1
                    and (n - 1) * self.stride[a] + first <= size
                    and (not left[2 * a] or k + 1 < self.kernel[a])
                    and (not left[2 * a + 1] or k >= 1)):
                continue
            new_pos[a] = add(pos[a], 1, mul(floordiv(add(pos[a], size), size), -1))
            left[2 * a] = left[2 * a + 1] = False
        return new_pos[0], new_pos[1], (left[0], left[1], left[2], left[3])


def _pair(v: Sequence[int] | int, default: Sequence[int] | None = None) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    seq = list(v) if v else list(default or ())
    if len(seq) == 1:
        return (seq[0], seq[0])
    if len(seq) != 2:
        raise NotLowerable(f"pooling parameter {v!r}")
    return (seq[0], seq[1])


def _window(kernel: Any, stride: Any, padding: Any, dilation: Any = 1) -> Window:
    k = _pair(kernel)
    w = Window(k, _pair(stride, k), _pair(padding), _pair(dilation))
    if k[0] * k[1] > MAX_WINDOW:
        raise NotLowerable(f"pooling window {k} larger than {MAX_WINDOW} elements")
    return w


def _window_input(ctx: GraphLowering, x: TensorValue, window: Window,
                  limit: int = MAX_REREAD_OPS) -> TensorValue:
    """``x`` as the pooling op reads it: stored first when windows overlap and it costs
    more than ``limit`` operations an element (see :data:`MAX_REREAD_OPS`)."""
    (kh, kw), (sh, sw) = window.kernel, window.stride
    if not isinstance(x, Lazy) or ctx.is_realized(x) or kh * kw <= sh * sw:
        return x
    return ctx.realize(x) if _ops(x) > limit else x


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


def _ops(x: Lazy) -> int:
    """How many operations computing one element of ``x`` takes."""
    return sum(isinstance(s, Compute) for s in probe(x).stmts)


def _inside(b: BodyBuilder, row: IndexExpr, col: IndexExpr, height: int, width: int,
            needed: tuple[bool, ...] = (True,) * 4) -> str | None:
    """A bool value: whether ``(row, col)`` lies in the ``height`` x ``width`` plane;
    only the ``needed`` checks (:meth:`Window.checks`), None when none is."""
    i64 = torch.int64
    conds = []
    for k, (pos, size) in enumerate(((row, height), (col, width))):
        if needed[2 * k] or needed[2 * k + 1]:
            v = b.index_value(pos)
            if needed[2 * k]:
                conds.append(b.compute("ge", v, b.literal(0, i64)))
            if needed[2 * k + 1]:
                conds.append(b.compute("lt", v, b.literal(size, i64)))
    return b.all_of(*conds) if conds else None


def _load_inside(b: BodyBuilder, x: TensorValue, lead: tuple[IndexExpr, ...],
                 row: IndexExpr, col: IndexExpr, inside: str | None, ct: torch.dtype) -> str:
    """``x[..., row, col]`` as ``ct``, loaded only where ``inside`` holds (if it is a
    check at all)."""
    if inside is None:
        return b.cast(x.element(b, (*lead, row, col)), ct)
    with b.masked(inside):
        return b.cast(x.element(b, (*lead, row, col)), ct)


def _first_position(b: BodyBuilder, window: Window, out: tuple[IndexExpr, IndexExpr],
                    width: int) -> str:
    """The flat index eager reports for a window wholly in the padding: its start row
    and column, each moved forward by the dilation until it is not negative."""
    i64 = torch.int64
    starts = []
    for o, s, p, d in zip(out, window.stride, window.padding, window.dilation):
        start = add(mul(o, s), -p)
        steps = -(-p // d)  # the start is at least -p
        pos = b.index_value(add(start, steps * d))
        for k in range(steps - 1, -1, -1):
            candidate = b.index_value(add(start, k * d))
            pos = b.compute("where", b.compute("ge", candidate, b.literal(0, i64)),
                            candidate, pos)
        starts.append(pos)
    return b.compute("add", b.compute("mul", starts[0], b.literal(width, i64)), starts[1])


def _check_input(x: TensorValue) -> None:
    if len(x.sizes) not in (3, 4):
        raise NotLowerable(f"2-d pooling of a {len(x.sizes)}-d tensor")
    if not x.dtype.is_floating_point:
        raise NotLowerable(f"pooling of {x.dtype}")


@lowering("aten::max_pool2d_with_indices.default")
def _max_pool2d(ctx: GraphLowering, node: Node, x: TensorValue, kernel_size: Any,
                stride: Any = (), padding: Any = 0, dilation: Any = 1,
                ceil_mode: bool = False) -> tuple[Lazy, Lazy]:
    _check_input(x)
    window = _window(kernel_size, stride, padding, dilation)
    x = _window_input(ctx, x, window, 0 if _reads_indices(ctx, node) else MAX_REREAD_OPS)
    height, width = x.sizes[-2:]
    ct = compute_dtype(x.dtype)
    i64 = torch.int64

    sizes = sizes_of(node, 0)

    def pooled(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> tuple[str, str]:
        """(max, flat argmax in the plane) like eager: the first strictly larger value
        wins, a NaN always wins, an all -inf window reports its first valid position,
        a window wholly in the padding :func:`_first_position`."""
        best = b.literal(float("-inf"), ct)
        where_ = _first_position(b, window, (index[-2], index[-1]), width)
        first = b.literal(False, torch.bool)
        seen: str | None = first  # None: a position surely inside was seen
        lead = index[:-2]
        for at, row, col in window.positions((index[-2], index[-1])):
            checks = window.checks(at, sizes[-2:], (height, width))
            row, col, checks = window.neighbour(at, (row, col), checks, sizes[-2:],
                                                (height, width))
            inside = _inside(b, row, col, height, width, checks)
            v = _load_inside(b, x, lead, row, col, inside, ct)
            flat = b.index_value(add(mul(row, width), col))
            take: str | None = None  # None: always (the window's first position, inside)
            if seen is None or seen != first:
                take = b.compute("logical_or", b.compute("gt", v, best), b.compute("isnan", v))
                if seen is not None:
                    take = b.compute("logical_or", take, b.compute("logical_not", seen))
            if inside is not None:
                take = inside if take is None else b.compute("logical_and", inside, take)
            best = v if take is None else b.compute("where", take, v, best)
            where_ = flat if take is None else b.compute("where", take, flat, where_)
            if inside is None:
                seen = None
            elif seen is not None:
                seen = b.compute("logical_or", seen, inside)
        return best, where_

    def maximum(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        """The max alone (no argmax to track: inference): a NaN wins, padding is -inf;
        two operations a window position, which vectorize."""
        best = b.literal(float("-inf"), ct)
        for at, row, col in window.positions((index[-2], index[-1])):
            checks = window.checks(at, sizes[-2:], (height, width))
            row, col, checks = window.neighbour(at, (row, col), checks, sizes[-2:],
                                                (height, width))
            inside = _inside(b, row, col, height, width, checks)
            v = _load_inside(b, x, index[:-2], row, col, inside, ct)
            best = b.compute("maximum", best,
                             v if inside is None else b.compute("where", inside, v, best))
        return best

    dtype = out_meta(node, 0).dtype
    values = Lazy(lambda b, i: b.cast(maximum(b, i), dtype), dtype, sizes)
    indices = Lazy(lambda b, i: pooled(b, i)[1], i64, sizes)
    return values, indices


@lowering("aten::max_pool2d_with_indices_backward.default")
def _max_pool2d_backward(ctx: GraphLowering, node: Node, grad: TensorValue, x: TensorValue,
                         kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                         ceil_mode: bool, indices: TensorValue) -> Stored:
    _check_input(x)
    meta = out_meta(node)
    height, width = x.sizes[-2:]
    i64 = torch.int64
    zeros = Lazy(lambda b, i: b.literal(0, meta.dtype), meta.dtype, x.sizes)
    if isinstance(indices, Lazy) and _ops(indices) > MAX_REREAD_OPS:
        # recomputed from the forward's input (the partitioner saves the input, not the
        # indices): computed in a vectorized kernel of its own, not inside the scatter,
        # whose loop runs sequentially (SqueezeNet's first pool: 16 against 2 ms)
        indices = ctx.realize(indices)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> tuple[tuple[IndexExpr, ...], str,
                                                               str | None]:
        flat = b.cast(indices.element(b, i), i64)
        w = b.literal(width, i64)
        row = b.compute("floordiv", flat, w)
        col = b.compute("remainder", flat, w)
        inside = b.all_of(b.compute("ge", flat, b.literal(0, i64)),
                          b.compute("lt", flat, b.literal(height * width, i64)))
        return (*i[:-2], Indirect(row), Indirect(col)), grad.element(b, i), inside

    return ctx.scatter(node, zeros, grad.sizes, fn, accumulate=True)


class _AvgPool(NamedTuple):
    window: Window
    count_include_pad: bool
    divisor_override: int | None


def _avg_divisor(b: BodyBuilder, p: _AvgPool, out: tuple[IndexExpr, IndexExpr],
                 height: int, width: int, dtype: torch.dtype) -> str:
    """The divisor of output position ``out``, as eager computes it: the window clipped
    to the padded plane (``count_include_pad``) or to the plane itself."""
    if p.divisor_override:
        return b.literal(p.divisor_override, dtype)
    i64 = torch.int64
    counts = []
    for pos, k, s, pad, size in zip(out, p.window.kernel, p.window.stride, p.window.padding,
                                    (height, width)):
        start = b.index_value(add(mul(pos, s), -pad))
        end = b.compute("minimum", b.compute("add", start, b.literal(k, i64)),
                        b.literal(size + pad, i64))
        if not p.count_include_pad:
            start = b.compute("maximum", start, b.literal(0, i64))
            end = b.compute("minimum", end, b.literal(size, i64))
        counts.append(b.compute("sub", end, start))
    return b.cast(b.compute("mul", *counts), dtype)


def _avg_params(kernel_size: Any, stride: Any, padding: Any, count_include_pad: bool,
                divisor_override: int | None) -> _AvgPool:
    # NOTE: ceil_mode only changes the output size, which the node's meta gives
    return _AvgPool(_window(kernel_size, stride, padding), count_include_pad,
                    divisor_override)


@lowering("aten::avg_pool2d.default")
def _avg_pool2d(ctx: GraphLowering, node: Node, x: TensorValue, kernel_size: Any,
                stride: Any = (), padding: Any = 0, ceil_mode: bool = False,
                count_include_pad: bool = True, divisor_override: int | None = None) -> Lazy:
    _check_input(x)
    p = _avg_params(kernel_size, stride, padding, count_include_pad, divisor_override)
    x = _window_input(ctx, x, p.window)
    height, width = x.sizes[-2:]
    meta = out_meta(node)
    ct = compute_dtype(meta.dtype)

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        total = b.literal(0, ct)
        out = (index[-2], index[-1])
        for at, row, col in p.window.positions(out):
            inside = _inside(b, row, col, height, width,
                             p.window.checks(at, sizes_of(node)[-2:], (height, width)))
            v = _load_inside(b, x, index[:-2], row, col, inside, ct)
            total = b.compute("add", total, v if inside is None else b.compute(
                "where", inside, v, b.literal(0, ct)))
        divided = b.compute("truediv", total, _avg_divisor(b, p, out, height, width, ct))
        return b.cast(divided, meta.dtype)

    return Lazy(fn, meta.dtype, sizes_of(node))


@lowering("aten::avg_pool2d_backward.default")
def _avg_pool2d_backward(ctx: GraphLowering, node: Node, grad: TensorValue, x: TensorValue,
                         kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool,
                         count_include_pad: bool, divisor_override: int | None) -> Stored:
    _check_input(x)
    p = _avg_params(kernel_size, stride, padding, count_include_pad, divisor_override)
    meta = out_meta(node)
    height, width = x.sizes[-2:]
    ct = compute_dtype(meta.dtype)
    kh, kw = p.window.kernel
    zeros = Lazy(lambda b, i: b.literal(0, meta.dtype), meta.dtype, x.sizes)
    n = len(grad.sizes)

    # the scatter runs over (output position, window row, window column)
    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> tuple[tuple[IndexExpr, ...], str,
                                                               str | None]:
        out, (wi, wj) = i[:n], i[n:]
        (sh, sw), (ph, pw) = p.window.stride, p.window.padding
        row = add(mul(out[-2], sh), wi, -ph)
        col = add(mul(out[-1], sw), wj, -pw)
        g = b.cast(grad.element(b, out), ct)
        share = b.compute("truediv", g, _avg_divisor(b, p, (out[-2], out[-1]), height,
                                                       width, ct))
        return (*out[:-2], row, col), share, _inside(b, row, col, height, width)

    return ctx.scatter(node, zeros, (*grad.sizes, kh, kw), fn, accumulate=True)


# -- adaptive average pooling ------------------------------------------------------------
# Output position o of a dimension of size n pooled to m averages the input positions
# [o*n // m, ((o+1)*n + m-1) // m): windows of varying size, at most adaptive_span(n, m).


def adaptive_span(n: int, m: int) -> int:
    """The largest window adaptive pooling from size ``n`` to ``m`` averages."""
    return max(((o + 1) * n + m - 1) // m - o * n // m for o in range(m))


def _adaptive_sizes(x: TensorValue, output_size: Any) -> tuple[int, int, int, int]:
    """``(height, width, out_height, out_width)``, static, with the unrolled window
    within :data:`MAX_WINDOW`.

    Raises:
        NotLowerable: symbolic sizes, or a window too large to unroll.
    """
    height, width = x.sizes[-2:]
    out_h, out_w = _pair(output_size)
    if not all(type(v) is int and v > 0 for v in (height, width, out_h, out_w)):
        raise NotLowerable(f"adaptive pooling of {x.sizes} to {output_size}: symbolic or "
                           "empty sizes")
    if adaptive_span(height, out_h) * adaptive_span(width, out_w) > MAX_WINDOW:
        raise NotLowerable(f"adaptive pooling window of {height}x{width} to "
                           f"{out_h}x{out_w} larger than {MAX_WINDOW} elements")
    return height, width, out_h, out_w


def _adaptive_bounds(out: IndexExpr, n: int, m: int) -> tuple[IndexExpr, IndexExpr]:
    """The window ``[start, end)`` of output position ``out`` (index expressions)."""
    return floordiv(mul(out, n), m), floordiv(add(mul(out, n), n + m - 1), m)


@lowering("aten::_adaptive_avg_pool2d.default")
def _adaptive_avg_pool2d(ctx: GraphLowering, node: Node, x: TensorValue,
                         output_size: Any) -> Lazy:
    _check_input(x)
    height, width, out_h, out_w = _adaptive_sizes(x, output_size)
    span_h, span_w = adaptive_span(height, out_h), adaptive_span(width, out_w)
    meta = out_meta(node)
    ct = compute_dtype(meta.dtype)

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        (h0, h1), (w0, w1) = (_adaptive_bounds(index[-2], height, out_h),
                              _adaptive_bounds(index[-1], width, out_w))
        end_h, end_w = b.index_value(h1), b.index_value(w1)
        total = b.literal(0, ct)
        for i in range(span_h):
            row = add(h0, i)
            in_row = b.compute("lt", b.index_value(row), end_h)
            for j in range(span_w):
                col = add(w0, j)
                inside = b.all_of(in_row, b.compute("lt", b.index_value(col), end_w))
                with b.masked(inside):
                    v = b.cast(x.element(b, (*index[:-2], row, col)), ct)
                total = b.compute("add", total, b.compute("where", inside, v, b.literal(0, ct)))
        count = b.compute("mul", b.compute("sub", end_h, b.index_value(h0)),
                          b.compute("sub", end_w, b.index_value(w0)))
        return b.cast(b.compute("truediv", total, b.cast(count, ct)), meta.dtype)

    return Lazy(fn, meta.dtype, sizes_of(node))


@lowering("aten::_adaptive_avg_pool2d_backward.default")
def _adaptive_avg_pool2d_backward(ctx: GraphLowering, node: Node, grad: TensorValue,
                                  x: TensorValue) -> Stored:
    _check_input(x)
    height, width, out_h, out_w = _adaptive_sizes(x, tuple(grad.sizes[-2:]))
    span_h, span_w = adaptive_span(height, out_h), adaptive_span(width, out_w)
    meta = out_meta(node)
    ct = compute_dtype(meta.dtype)
    zeros = Lazy(lambda b, i: b.literal(0, meta.dtype), meta.dtype, x.sizes)
    n = len(grad.sizes)

    # the scatter runs over (output position, window row, window column)
    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> tuple[tuple[IndexExpr, ...], str,
                                                               str | None]:
        out, (wi, wj) = i[:n], i[n:]
        (h0, h1), (w0, w1) = (_adaptive_bounds(out[-2], height, out_h),
                              _adaptive_bounds(out[-1], width, out_w))
        row, col = add(h0, wi), add(w0, wj)
        end_h, end_w = b.index_value(h1), b.index_value(w1)
        inside = b.all_of(b.compute("lt", b.index_value(row), end_h),
                          b.compute("lt", b.index_value(col), end_w))
        count = b.compute("mul", b.compute("sub", end_h, b.index_value(h0)),
                          b.compute("sub", end_w, b.index_value(w0)))
        share = b.compute("truediv", b.cast(grad.element(b, out), ct), b.cast(count, ct))
        return (*out[:-2], row, col), share, inside

    return ctx.scatter(node, zeros, (*grad.sizes, span_h, span_w), fn, accumulate=True)
