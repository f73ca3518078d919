"""Bicubic ``grid_sampler_2d``'s taps: the four pixels around a coordinate along one
axis and their weights, Keys' cubic convolution kernel with ``a = -0.75`` (as eager's
bicubic sampling and upsampling use):

    k(s) = ((a + 2) s - (a + 3)) s^2 + 1          for |s| <= 1
    k(s) = ((a s - 5 a) s + 8 a) s - 4 a          for 1 < |s| < 2

For ``t = x - floor(x)`` the pixels ``floor(x) - 1 .. floor(x) + 2`` lie at distances
``1 + t, t, 1 - t, (1 - t) + 1``. Unlike bilinear and nearest, the padding applies to
each pixel's coordinate, not to ``x`` (a border pixel is read again for the pixels past
the edge), so the derivative of the result with respect to ``x`` is the weights' alone:
``k'`` at each distance, negated for the pixels after ``x``.
"""

from __future__ import annotations

import torch
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.grid_sampler_coords import (
    ZEROS,
    Axis,
    Taps,
    on_plane,
    pad,
    pixel_index,
)

A = -0.75


def _near(b: BodyBuilder, s: str, ct: torch.dtype) -> str:
    """k(s) for ``|s| <= 1``."""
    inner = b.compute("sub", b.compute("mul", b.literal(A + 2, ct), s), b.literal(A + 3, ct))
    return b.compute("add", b.compute("mul", b.compute("mul", inner, s), s),
                     b.literal(1, ct))


def _far(b: BodyBuilder, s: str, ct: torch.dtype) -> str:
    """k(s) for ``1 < |s| < 2``."""
    inner = b.compute("sub", b.compute("mul", b.literal(A, ct), s), b.literal(5 * A, ct))
    inner = b.compute("add", b.compute("mul", inner, s), b.literal(8 * A, ct))
    return b.compute("sub", b.compute("mul", inner, s), b.literal(4 * A, ct))


def _near_slope(b: BodyBuilder, s: str, ct: torch.dtype) -> str:
    """k'(s) for ``|s| <= 1``: ``(3 (a + 2) s - 2 (a + 3)) s``."""
    inner = b.compute("sub", b.compute("mul", b.literal(3 * (A + 2), ct), s),
                      b.literal(2 * (A + 3), ct))
    return b.compute("mul", inner, s)


def _far_slope(b: BodyBuilder, s: str, ct: torch.dtype) -> str:
    """k'(s) for ``1 < |s| < 2``: ``(3 a s - 10 a) s + 8 a``."""
    inner = b.compute("sub", b.compute("mul", b.literal(3 * A, ct), s),
                      b.literal(10 * A, ct))
    return b.compute("add", b.compute("mul", inner, s), b.literal(8 * A, ct))


def cubic_taps(b: BodyBuilder, x: str, axis: Axis, ct: torch.dtype) -> Taps:
    """Bicubic's four pixels along ``axis`` around the unpadded coordinate ``x``."""
    one = b.literal(1, ct)
    base = b.compute("floor", x)
    t = b.compute("sub", x, base)
    before = b.compute("add", t, one)
    after = b.compute("sub", one, t)
    beyond = b.compute("add", after, one)
    weights = (_far(b, before, ct), _near(b, t, ct), _near(b, after, ct),
               _far(b, beyond, ct))
    slopes = (_far_slope(b, before, ct), _near_slope(b, t, ct),
              b.compute("neg", _near_slope(b, after, ct)),
              b.compute("neg", _far_slope(b, beyond, ct)))
    index, valid = [], []
    for k in range(4):
        pixel = pad(b, b.compute("add", base, b.literal(k - 1, ct)), axis, ct).value
        ok = on_plane(b, pixel, axis, ct) if axis.padding == ZEROS else None
        index.append(pixel_index(b, pixel, ok, ct))
        valid.append(ok)
    return Taps(tuple(index), tuple(valid), weights, slopes)
