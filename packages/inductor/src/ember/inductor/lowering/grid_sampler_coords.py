"""Where ``grid_sampler_2d`` reads: a grid value mapped onto an axis of the input plane
(unnormalised, padded) and the pixels it reads there, with their weights, as loop-IR
values (used by the rules of :mod:`.grid_sampler`; bicubic's taps: :mod:`.grid_sampler_cubic`).

Along an axis of ``S`` pixels, grid value ``g`` maps to ``x = (g + 1) * ((S - 1) / 2)``
with aligned corners, else ``x = (g + 1) * (S / 2) - 0.5`` (one rounding: eager's CPU
kernel computes it with a fused multiply-add). Padding ``border`` clips ``x`` to
``[0, S - 1]`` (a NaN to 0); ``reflection`` first folds it into one period: with
``lo = 0, p = 2 (S - 1)`` (aligned) or ``lo = -0.5, p = 2 S``, ``d = |x - lo|``,
``e = d - trunc(d / p) * p`` (one rounding), ``x = min(e, p - e) + lo``, then clips (an
infinity or a NaN gives 0). The clip's derivative is 1 where ``0 < x < S - 1``
(strictly), else 0; the fold's is the sign of ``x - lo``, negated where it mirrored.

Bilinear reads the pixels ``floor(x)`` and ``floor(x) + 1`` with weights
``floor(x) + 1 - x`` and ``x - floor(x)``; nearest reads ``nearbyint(x)`` (half to even).
A pixel outside the plane (``zeros`` padding) reads as 0 and is never loaded; its index
is 0, so that no NaN, infinity or value beyond int64 is converted to an integer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import sympy
import torch
from ember.inductor.loop_ir import Compute, IndexExpr, Indirect, Int
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.values import Lazy, TensorValue, probe

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering

# interpolation_mode and padding_mode, as ATen numbers them
BILINEAR, NEAREST, BICUBIC = 0, 1, 2
ZEROS, BORDER, REFLECTION = 0, 1, 2

# A computed input or grid costing more than this many operations an element is stored
# before the sampling reads it (several pixels an output element, the grid once a
# channel), as pooling does with its overlapping windows.
MAX_REREAD_OPS = 3

I64 = torch.int64


class Axis(NamedTuple):
    """One axis of the sampled plane: its number of pixels (an int or a symbolic size)
    and how grid values map onto it."""

    size: Any
    align_corners: bool
    padding: int


class Coordinate(NamedTuple):
    """A grid value mapped onto an axis (pixel units), and what its derivative with
    respect to the grid value needs: ``inside`` (bool), where the clip let it through
    (None: not clipped), and ``mirrored`` (bool), where the fold flipped its direction
    (None: not folded)."""

    value: str
    inside: str | None
    mirrored: str | None


class Taps(NamedTuple):
    """The pixels a coordinate reads along its axis, in order: each one's int64 index
    (0 where it lies outside), whether it lies inside (None: always), its weight and
    the weight's derivative with respect to the coordinate."""

    pixel: tuple[str, ...]
    valid: tuple[str | None, ...]
    weight: tuple[str, ...]
    slope: tuple[str, ...]


def size_value(b: BodyBuilder, n: Any, ct: torch.dtype, factor: float = 1.0) -> str:
    """``n * factor`` as ``ct``; a symbolic ``n`` is read from the size arguments."""
    if isinstance(n, (int, sympy.Integer)):
        return b.literal(int(n) * factor, ct)
    value = b.literal(n, ct)
    return value if factor == 1.0 else b.compute("mul", value, b.literal(factor, ct))


def _scale(b: BodyBuilder, axis: Axis, ct: torch.dtype) -> str:
    """d x / d g: ``(S - 1) / 2`` with aligned corners, else ``S / 2``."""
    return size_value(b, axis.size - 1 if axis.align_corners else axis.size, ct, 0.5)


def _fused(b: BodyBuilder, a: str, m: str, c: str, ct: torch.dtype) -> str:
    """``a * m + c`` rounded once, as the fused multiply-add of eager's CPU kernel: for
    float32 through float64, where the product of a float32 and the sizes here is exact
    (float64: rounded twice, as there is no wider type)."""
    if ct != torch.float32:
        return b.compute("add", b.compute("mul", a, m), c)
    wide = torch.float64
    product = b.compute("mul", b.cast(a, wide), b.cast(m, wide))
    return b.cast(b.compute("add", product, b.cast(c, wide)), ct)


def _clip(b: BodyBuilder, x: str, axis: Axis, ct: torch.dtype) -> tuple[str, str]:
    """``x`` clipped to ``[0, S - 1]`` (NaN to 0), and where it was strictly inside."""
    zero, last = b.literal(0, ct), size_value(b, axis.size - 1, ct)
    above, below = b.compute("gt", x, zero), b.compute("lt", x, last)
    clipped = b.compute("where", above, b.compute("where", below, x, last), zero)
    return clipped, b.compute("logical_and", above, below)


def _reflect(b: BodyBuilder, x: str, axis: Axis, ct: torch.dtype) -> tuple[str, str]:
    """``x`` folded into ``[lo, lo + p / 2]`` (module doc), and where the fold mirrored
    it (its derivative is -1 there)."""
    zero = b.literal(0, ct)
    period = size_value(b, axis.size - 1 if axis.align_corners else axis.size, ct, 2.0)
    rel = x if axis.align_corners else b.compute("add", x, b.literal(0.5, ct))
    negative = b.compute("lt", rel, zero)
    distance = b.compute("where", negative, b.compute("neg", rel), rel)
    # NOTE: fmod(distance, period) as eager computes it: distance - trunc(distance /
    # period) * period in one rounding (an exact fmod differs from it beyond 2**24)
    periods = b.compute("trunc", b.compute("truediv", distance, period))
    extra = _fused(b, b.compute("neg", periods), period, distance, ct)
    mirror = b.compute("sub", period, extra)
    flip = b.compute("gt", extra, mirror)
    folded = b.compute("where", flip, mirror, extra)
    if not axis.align_corners:
        folded = b.compute("sub", folded, b.literal(0.5, ct))
    return folded, b.compute("logical_xor", negative, flip)


def unnormalize(b: BodyBuilder, g: str, axis: Axis, ct: torch.dtype) -> str:
    """Grid value ``g`` (as ``ct``) in pixel units along ``axis``, not padded."""
    shifted = b.compute("add", g, b.literal(1, ct))
    if axis.align_corners:
        return b.compute("mul", shifted, _scale(b, axis, ct))
    return _fused(b, shifted, _scale(b, axis, ct), b.literal(-0.5, ct), ct)


def pad(b: BodyBuilder, x: str, axis: Axis, ct: torch.dtype) -> Coordinate:
    """Pixel coordinate ``x`` padded as ``axis`` pads (module doc)."""
    if axis.padding == ZEROS:
        return Coordinate(x, None, None)
    mirrored = None
    if axis.padding == REFLECTION:
        x, mirrored = _reflect(b, x, axis, ct)
    x, inside = _clip(b, x, axis, ct)
    return Coordinate(x, inside, mirrored)


def derivative(b: BodyBuilder, c: Coordinate, axis: Axis, ct: torch.dtype) -> str:
    """d x / d g of coordinate ``c``: the scale, times the padding's factor (0 where
    clipped, -1 where mirrored)."""
    scale = _scale(b, axis, ct)
    if c.mirrored is not None:
        scale = b.compute("where", c.mirrored, b.compute("neg", scale), scale)
    if c.inside is not None:
        scale = b.compute("where", c.inside, scale, b.literal(0, ct))
    return scale


def on_plane(b: BodyBuilder, pixel: str, axis: Axis, ct: torch.dtype, low: bool = True,
             high: bool = True) -> str | None:
    """Whether the (integral, float) ``pixel`` lies in ``[0, S - 1]``: only the ``low``
    and ``high`` checks (None when neither)."""
    conds = []
    if low:
        conds.append(b.compute("ge", pixel, b.literal(0, ct)))
    if high:
        conds.append(b.compute("le", pixel, size_value(b, axis.size - 1, ct)))
    return b.all_of(*conds) if conds else None


def pixel_index(b: BodyBuilder, pixel: str, valid: str | None, ct: torch.dtype) -> str:
    """The int64 index of ``pixel``; 0 where it is not ``valid``."""
    if valid is not None:
        pixel = b.compute("where", valid, pixel, b.literal(0, ct))
    return b.cast(pixel, I64)


def linear_taps(b: BodyBuilder, c: Coordinate, axis: Axis, ct: torch.dtype) -> Taps:
    """Bilinear's two pixels along ``axis``. A padded coordinate lies in ``[0, S - 1]``:
    only the pixel after it may lie outside."""
    zeros = axis.padding == ZEROS
    low = b.compute("floor", c.value)
    high = b.compute("add", low, b.literal(1, ct))
    valid_low = on_plane(b, low, axis, ct) if zeros else None
    valid_high = on_plane(b, high, axis, ct, low=zeros)
    return Taps((pixel_index(b, low, valid_low, ct), pixel_index(b, high, valid_high, ct)),
                (valid_low, valid_high),
                (b.compute("sub", high, c.value), b.compute("sub", c.value, low)),
                (b.literal(-1, ct), b.literal(1, ct)))


def nearest_taps(b: BodyBuilder, c: Coordinate, axis: Axis, ct: torch.dtype) -> Taps:
    """Nearest's one pixel along ``axis``: ``nearbyint`` (half to even)."""
    pixel = b.compute("round", c.value)
    valid = on_plane(b, pixel, axis, ct) if axis.padding == ZEROS else None
    return Taps((pixel_index(b, pixel, valid, ct),), (valid,), (b.literal(1, ct),),
                (b.literal(0, ct),))


def grid_values(b: BodyBuilder, grid: TensorValue, n: IndexExpr, h: IndexExpr,
                w: IndexExpr, ct: torch.dtype) -> tuple[str, str]:
    """The grid's (x, y) at output position ``(n, h, w)``, as ``ct``."""
    return (b.cast(grid.element(b, (n, h, w, Int(0))), ct),
            b.cast(grid.element(b, (n, h, w, Int(1))), ct))


def read(b: BodyBuilder, x: TensorValue, lead: tuple[IndexExpr, ...], row: str, col: str,
         valid: str | None, ct: torch.dtype) -> str:
    """``x[*lead, row, col]`` as ``ct``, 0 where not ``valid`` (loaded only where it is)."""
    index = (*lead, Indirect(row), Indirect(col))
    if valid is None:
        return b.cast(x.element(b, index), ct)
    with b.masked(valid):
        v = b.cast(x.element(b, index), ct)
    return b.compute("where", valid, v, b.literal(0, ct))


def both(b: BodyBuilder, first: str | None, second: str | None) -> str | None:
    """``first and second``, either None meaning true (None when both are)."""
    if first is None or second is None:
        return first if second is None else second
    return b.compute("logical_and", first, second)


def _ops(x: Lazy) -> int:
    return sum(isinstance(s, Compute) for s in probe(x).stmts)


def reread(ctx: GraphLowering, x: TensorValue) -> TensorValue:
    """``x`` as the sampling reads it: stored first when it is computed and costs more
    than :data:`MAX_REREAD_OPS` operations an element."""
    if isinstance(x, Lazy) and not ctx.is_realized(x) and _ops(x) > MAX_REREAD_OPS:
        return ctx.realize(x)
    return x
