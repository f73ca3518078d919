"""Lowering rules for ``grid_sampler_2d`` and ``grid_sampler_2d_backward``
(``F.grid_sample`` on 4-d inputs: RAFT's correlation lookup, spatial transformers,
deformable warps) in every interpolation mode (bilinear, nearest, bicubic) and padding
mode (zeros, border, reflection); and for ``cudnn_grid_sampler`` and its backward, which
a CUDA program records instead for bilinear, zero-padded, corner-aligned sampling.

Why a lowering and not a decomposition in the aot stage: the aot stage decomposes below
autograd (its dispatch mode runs under torch's autograd engine), so decomposing the
forward would not change the backward: autograd still calls ``grid_sampler_2d_backward``,
which would need a decomposition of its own. Decomposed into Core ATen, both would read
the input through ``index.Tensor`` and write its gradient through ``index_put``; their
indexes, computed from floats, have no range the inductor can prove, so every corner
load and every corner write would carry a run-time bounds check, a negative-index wrap
and a clamp. Lowered here, like pooling (``lowering/pooling/``):

- the forward is an element function over the output (a ``Lazy``): the grid's two
  values are loaded, mapped onto the plane (:mod:`.grid_sampler_coords`) and the input
  is read at the source pixels (4 bilinear, 1 nearest, 16 bicubic:
  :mod:`.grid_sampler_cubic`) through ``Indirect`` indexes, each load masked where its
  pixel lies outside the plane. It fuses with the grid's producer (a flow added to a base
  grid) and with the output's consumers: one kernel.
- the input's gradient is a scatter (:meth:`GraphLowering.scatter`, as
  ``avg_pool2d_backward``'s) over (output element, pixel row, pixel column): each output
  gradient times the pixel's weight, added into the pixel where it lies inside. The
  grid's gradient is a sum over channels (``ctx.reduction``) of the output gradient times
  the pixel values times the weights' derivatives, multiplied after the sum by the
  coordinate's derivative (the unnormalisation's scale, the padding's factor). Only the
  input gradient ``output_mask`` asks for is computed; eager always returns the grid's
  (unread, it is dropped with its kernel).

Semantics: eager's (``tests/test_grid_sampler.py`` checks every combination against
eager, non-finite grids included). Eager's CPU kernel crashes on some non-finite
coordinates (bilinear with border padding on NaN, with reflection on NaN and
infinities); here those read pixel 0, as its nearest and bicubic kernels do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from ember.inductor.codegen.registry import backend_for
from ember.inductor.loop_ir import IndexExpr, Indirect
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.common import compute_dtype, out_meta
from ember.inductor.lowering.grid_sampler_coords import (
    BICUBIC,
    BILINEAR,
    BORDER,
    I64,
    NEAREST,
    REFLECTION,
    ZEROS,
    Axis,
    Coordinate,
    Taps,
    both,
    derivative,
    grid_values,
    linear_taps,
    nearest_taps,
    pad,
    read,
    reread,
    unnormalize,
)
from ember.inductor.lowering.grid_sampler_cubic import cubic_taps
from ember.inductor.lowering.reductions import reduce
from ember.inductor.lowering.registry import NotLowerable, lowering
from ember.inductor.lowering.scatter import add_into_zeros
from ember.inductor.lowering.values import Lazy, Stored, TensorValue
from ember.runtime.ir import Node, TensorMeta

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering


class Sampler(NamedTuple):
    """One call's geometry: the input plane's two axes and the interpolation mode."""

    rows: Axis
    cols: Axis
    mode: int

    def coordinates(self, b: BodyBuilder, grid: TensorValue, n: IndexExpr, h: IndexExpr,
                    w: IndexExpr, ct: torch.dtype) -> tuple[Coordinate, Coordinate]:
        """(row, column) coordinates of output position ``(n, h, w)`` (the grid holds
        x, the column's, first); bicubic's are not padded (its pixels are)."""
        gx, gy = grid_values(b, grid, n, h, w, ct)
        y, x = unnormalize(b, gy, self.rows, ct), unnormalize(b, gx, self.cols, ct)
        if self.mode == BICUBIC:
            return Coordinate(y, None, None), Coordinate(x, None, None)
        return pad(b, y, self.rows, ct), pad(b, x, self.cols, ct)

    def taps(self, b: BodyBuilder, grid: TensorValue, n: IndexExpr, h: IndexExpr,
             w: IndexExpr, ct: torch.dtype) -> tuple[Taps, Taps]:
        """(row, column) taps of output position ``(n, h, w)``."""
        y, x = self.coordinates(b, grid, n, h, w, ct)
        if self.mode == BICUBIC:
            return cubic_taps(b, y.value, self.rows, ct), cubic_taps(b, x.value, self.cols, ct)
        if self.mode == NEAREST:
            return nearest_taps(b, y, self.rows, ct), nearest_taps(b, x, self.cols, ct)
        return linear_taps(b, y, self.rows, ct), linear_taps(b, x, self.cols, ct)


def sampler(x: TensorValue, grid: TensorValue, mode: int, padding: int,
            align_corners: bool) -> Sampler:
    """The geometry of one call; NotLowerable for what the rules do not cover."""
    if mode not in (BILINEAR, NEAREST, BICUBIC) or padding not in (ZEROS, BORDER, REFLECTION):
        raise NotLowerable(f"grid_sampler: interpolation {mode}, padding {padding}")
    if len(x.sizes) != 4 or len(grid.sizes) != 4:
        raise NotLowerable("grid_sampler_2d of other than 4-d tensors")
    if not x.dtype.is_floating_point or grid.dtype != x.dtype:
        raise NotLowerable(f"grid_sampler_2d of {x.dtype} with a {grid.dtype} grid")
    height, width = x.sizes[2:]
    if any(isinstance(s, int) and s == 0 for s in (height, width)):
        raise NotLowerable("grid_sampler_2d of an empty plane")
    return Sampler(Axis(height, bool(align_corners), padding),
                   Axis(width, bool(align_corners), padding), mode)


def _pixels(b: BodyBuilder, x: TensorValue, n: IndexExpr, c: IndexExpr, ty: Taps,
            tx: Taps, ct: torch.dtype) -> list[list[str]]:
    """The input's values at every (row tap, column tap), 0 outside the plane."""
    return [[read(b, x, (n, c), ty.pixel[r], tx.pixel[k], both(b, ty.valid[r], tx.valid[k]),
                  ct) for k in range(len(tx.pixel))] for r in range(len(ty.pixel))]


def _weighted(b: BodyBuilder, values: Sequence[str], weights: Sequence[str]) -> str:
    """``values[0] * weights[0] + values[1] * weights[1] + ...``, in that order.

    NOTE: eager's bilinear CPU kernel sums with fused multiply-adds,
    ``fma(v1, w1, v0 * w0)`` and on; g++ contracts a product and a sum into one too, the
    first product it meets that feeds the sum: the second term's product comes first
    so that it is the one (C++ only; Triton's compiler contracts as it likes)."""
    if len(values) == 1:
        return b.compute("mul", values[0], weights[0])
    second = b.compute("mul", values[1], weights[1])
    total = b.compute("add", b.compute("mul", values[0], weights[0]), second)
    for v, w in zip(values[2:], weights[2:]):
        total = b.compute("add", total, b.compute("mul", v, w))
    return total


# -- forward -----------------------------------------------------------------------------
def _forward(ctx: GraphLowering, node: Node, x: TensorValue, grid: TensorValue,
             geometry: Sampler) -> Lazy:
    meta = out_meta(node)
    ct = compute_dtype(meta.dtype)
    x, grid = reread(ctx, x), reread(ctx, grid)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        n, c, h, w = i
        ty, tx = geometry.taps(b, grid, n, h, w, ct)
        v = _pixels(b, x, n, c, ty, tx, ct)
        if geometry.mode == NEAREST:
            return b.op_result(v[0][0], meta.dtype)
        if geometry.mode == BICUBIC:  # each row along x, then the rows along y
            rows = [_weighted(b, row, tx.weight) for row in v]
            return b.op_result(_weighted(b, rows, ty.weight), meta.dtype)
        # bilinear, eager's order: north-west, north-east, south-west, south-east
        return b.op_result(_weighted(b, [v[0][0], v[0][1], v[1][0], v[1][1]], [
            b.compute("mul", tx.weight[k], ty.weight[r]) for r in (0, 1) for k in (0, 1)]),
            meta.dtype)

    sizes = (x.sizes[0], x.sizes[1], grid.sizes[1], grid.sizes[2])
    return Lazy(fn, meta.dtype, sizes)


@lowering("aten::grid_sampler_2d.default")
def _grid_sampler_2d(ctx: GraphLowering, node: Node, x: TensorValue, grid: TensorValue,
                     interpolation_mode: int, padding_mode: int,
                     align_corners: bool) -> Lazy:
    geometry = sampler(x, grid, interpolation_mode, padding_mode, align_corners)
    return _forward(ctx, node, x, grid, geometry)


@lowering("aten::cudnn_grid_sampler.default")
def _cudnn_grid_sampler(ctx: GraphLowering, node: Node, x: TensorValue,
                        grid: TensorValue) -> Lazy:
    """cuDNN's sampler: bilinear, zero padding, aligned corners."""
    return _forward(ctx, node, x, grid, sampler(x, grid, BILINEAR, ZEROS, True))


# -- backward ----------------------------------------------------------------------------
def _result(node: Node, i: int) -> Node:
    """``node`` narrowed to its ``i``-th result (what ``ctx.scatter`` expects)."""
    assert isinstance(node.meta, tuple)
    return Node(node.name, node.op, node.target, meta=node.meta[i])


def _select(b: BodyBuilder, at: IndexExpr, items: Sequence[str]) -> str:
    """``items[at]`` for the loop index ``at`` over ``len(items)``."""
    if len(items) == 1:
        return items[0]
    k = b.index_value(at)
    chosen = items[-1]
    for j in range(len(items) - 2, -1, -1):
        chosen = b.compute("where", b.compute("eq", k, b.literal(j, I64)), items[j], chosen)
    return chosen


def _select_valid(b: BodyBuilder, at: IndexExpr, items: Sequence[str | None]) -> str | None:
    if all(v is None for v in items):
        return None
    yes = b.literal(True, torch.bool)
    return _select(b, at, [yes if v is None else v for v in items])


def _input_grad(ctx: GraphLowering, node: Node, grad: TensorValue, x: TensorValue,
                grid: TensorValue, geometry: Sampler) -> Stored:
    """The input's gradient: every output gradient times each source pixel's weight,
    added into that pixel (a scatter over output elements and the pixels' rows and
    columns)."""
    meta = out_meta(node)
    if not backend_for(ctx.device.type).supports_atomic_add(meta.dtype):
        raise NotLowerable(f"no atomic add for {meta.dtype} on {ctx.device.type}")
    ct = compute_dtype(meta.dtype)
    taps = {BILINEAR: 2, NEAREST: 1, BICUBIC: 4}[geometry.mode]

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> tuple[tuple[IndexExpr, ...], str,
                                                               str | None]:
        (n, c, h, w), (r, k) = i[:4], i[4:]
        ty, tx = geometry.taps(b, grid, n, h, w, ct)
        value = b.cast(grad.element(b, (n, c, h, w)), ct)
        wx, wy = _select(b, k, tx.weight), _select(b, r, ty.weight)
        if geometry.mode == BICUBIC:  # eager's order: (grad * wx) * wy
            value = b.compute("mul", b.compute("mul", value, wx), wy)
        elif geometry.mode == BILINEAR:
            value = b.compute("mul", value, b.compute("mul", wx, wy))
        valid = both(b, _select_valid(b, r, ty.valid), _select_valid(b, k, tx.valid))
        row, col = _select(b, r, ty.pixel), _select(b, k, tx.pixel)
        return (n, c, Indirect(row), Indirect(col)), value, valid

    return add_into_zeros(ctx, node, x, (*grad.sizes, taps, taps), fn)


def _grid_terms(b: BodyBuilder, v: list[list[str]], ty: Taps, tx: Taps,
                mode: int) -> tuple[str, str]:
    """d out / d x and d out / d y of one channel, per unit output gradient."""
    if mode == BILINEAR:  # the other axis's weights times the differences of the pixels
        def pair(d0: tuple[str, str], d1: tuple[str, str], w: Sequence[str]) -> str:
            # NOTE: the first product first: g++ contracts it with the sum, as eager's
            # kernel computes it (bitwise eager's gradients in the tests)
            first = b.compute("mul", b.compute("sub", *d0), w[0])
            return b.compute("add", first, b.compute("mul", b.compute("sub", *d1), w[1]))
        return (pair((v[0][1], v[0][0]), (v[1][1], v[1][0]), ty.weight),
                pair((v[1][0], v[0][0]), (v[1][1], v[0][1]), tx.weight))
    along_x = _weighted(b, [_weighted(b, row, tx.slope) for row in v], ty.weight)
    along_y = _weighted(b, [_weighted(b, row, tx.weight) for row in v], ty.slope)
    return along_x, along_y


def _grid_grad(ctx: GraphLowering, node: Node, grad: TensorValue, x: TensorValue,
               grid: TensorValue, geometry: Sampler) -> TensorValue:
    """The grid's gradient: zero for nearest; else the sum over channels of the output
    gradient times d out / d (x, y), then times d (x, y) / d g."""
    meta = out_meta(node)
    ct = compute_dtype(meta.dtype)
    sizes = tuple(grid.sizes)
    if geometry.mode == NEAREST:
        return Lazy(lambda b, i: b.literal(0, meta.dtype), meta.dtype, sizes)
    batch, channels = x.sizes[:2]

    def term(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        n, h, w, axis, c = i
        ty, tx = geometry.taps(b, grid, n, h, w, ct)
        along_x, along_y = _grid_terms(b, _pixels(b, x, n, c, ty, tx, ct), ty, tx,
                                       geometry.mode)
        g = b.cast(grad.element(b, (n, c, h, w)), ct)
        return b.compute("mul", g, _select(b, axis, [along_x, along_y]))

    full = (batch, *sizes[1:3], 2, channels)
    summed = reduce(ctx, node, "sum", term, full, (4,), False, ct)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        n, h, w, axis = i
        y, x_ = geometry.coordinates(b, grid, n, h, w, ct)
        scale = _select(b, axis, [derivative(b, x_, geometry.cols, ct),
                                  derivative(b, y, geometry.rows, ct)])
        return b.op_result(b.compute("mul", b.cast(summed.element(b, i), ct), scale),
                           meta.dtype)

    return Lazy(fn, meta.dtype, sizes)


def _backward(ctx: GraphLowering, node: Node, grad: TensorValue, x: TensorValue,
              grid: TensorValue, geometry: Sampler,
              input_wanted: bool) -> tuple[Stored | None, TensorValue]:
    metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
    if len(metas) != 2 or not isinstance(metas[1], TensorMeta):
        raise NotLowerable("grid_sampler backward without a grid gradient")
    grad, x, grid = reread(ctx, grad), reread(ctx, x), reread(ctx, grid)
    grad_input = None
    if input_wanted and isinstance(metas[0], TensorMeta):
        grad_input = _input_grad(ctx, _result(node, 0), grad, x, grid, geometry)
    return grad_input, _grid_grad(ctx, _result(node, 1), grad, x, grid, geometry)


@lowering("aten::grid_sampler_2d_backward.default")
def _grid_sampler_2d_backward(ctx: GraphLowering, node: Node, grad: TensorValue,
                              x: TensorValue, grid: TensorValue, interpolation_mode: int,
                              padding_mode: int, align_corners: bool,
                              output_mask: Sequence[bool]) -> tuple[Any, ...]:
    geometry = sampler(x, grid, interpolation_mode, padding_mode, align_corners)
    return _backward(ctx, node, grad, x, grid, geometry, bool(output_mask[0]))


@lowering("aten::cudnn_grid_sampler_backward.default")
def _cudnn_grid_sampler_backward(ctx: GraphLowering, node: Node, x: TensorValue,
                                 grid: TensorValue, grad: TensorValue) -> tuple[Any, ...]:
    geometry = sampler(x, grid, BILINEAR, ZEROS, True)
    return _backward(ctx, node, grad, x, grid, geometry, True)
