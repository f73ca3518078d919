"""The pooling windows that contain one input position: the gather form of pooling's
backward.

A pooling backward sends each output gradient to input positions of its window. Written
as a scatter (one program per output position adding into a zeroed gradient) it needs a
zero fill, atomic adds on a GPU and a sequential loop on a CPU, and it cannot fuse with
what reads the gradient. Written as a gather, each input position sums the gradients of
the windows that contain it: a plain element function over the input, which can fuse
into its consumers (a ReLU's and a batch norm's backward) like any other (a max pool's
is stored by a kernel of its own, measured faster: ``max_pool.STORE_GATHERED``).

With stride ``s``, padding ``p`` and a window of ``k`` elements (dilation 1), input
position ``h`` lies in window ``o`` when ``o*s - p <= h <= o*s - p + k - 1``, that is for
``o`` from ``ceil((h + p - k + 1) / s)`` to ``floor((h + p) / s)``: at most ``ceil(k / s)``
windows a dim (2 x 2 for ResNet's 3 x 3 pool of stride 2, one for a 2 x 2 pool of stride
2). :func:`covering_windows` lists that many candidates a dim, each with the checks that
it is such a window and inside the output, in ascending order: eager's kernels add the
windows' gradients in that order.

Where the gather runs is a table by device (:data:`GATHER_LAYOUTS`): on a CPU a gather
over a contiguous (NCHW) gradient ran 3x slower than the scatter (its innermost loop
runs over the width, whose windows ``w // s`` do not vectorize), and 5x faster over a
channels-last one (8 x 64 x 56 x 56, ResNet's stem pool, 2 threads).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from ember.inductor.loop_ir import add, floordiv
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.pooling.window import MAX_REREAD_OPS, Position, Window, ops
from ember.inductor.lowering.values import Lazy, TensorValue
from ember.runtime.ir import TensorMeta

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering

Candidate = tuple[Position, "str | None"]


#: device type -> the gradient layouts its pooling backward gathers for ("any", or
#: "channels_last": the dim before the spatial ones is the innermost); other layouts and
#: devices scatter (module doc)
GATHER_LAYOUTS: dict[str, str] = {"cuda": "any", "cpu": "channels_last"}


def gather_windows(window: Window, device: str, grad_input: TensorMeta) -> int | None:
    """How many candidate windows :func:`covering_windows` lists for each input position
    of a pooling backward on ``device`` (a device type) whose result is ``grad_input`` (at
    most the window's elements, so at most :data:`~.window.MAX_WINDOW`), or None where
    the backward stays a scatter: a dilated window, or a layout the device does not
    gather for (:data:`GATHER_LAYOUTS`)."""
    if any(d != 1 for d in window.dilation):
        return None
    layouts = GATHER_LAYOUTS.get(device)
    if layouts is None:
        return None
    if layouts == "channels_last":
        channel = len(grad_input.sizes) - len(window.kernel) - 1
        if (channel < 0 or grad_input.sizes[channel] == 1
                or grad_input.strides[channel] != 1):
            return None
    return math.prod(-(-k // s) for k, s in zip(window.kernel, window.stride))


def gathered_input(ctx: GraphLowering, grad: TensorValue, candidates: int) -> TensorValue:
    """``grad`` as a gather reads it: stored first when each position reads it for
    several candidate windows and one element of it costs more than
    :data:`~.window.MAX_REREAD_OPS` operations (as :func:`~.window.window_input` does
    for a forward's overlapping windows)."""
    if (candidates > 1 and isinstance(grad, Lazy) and not ctx.is_realized(grad)
            and ops(grad) > MAX_REREAD_OPS):
        return ctx.realize(grad)
    return grad


def _dim_candidates(b: BodyBuilder, pos: Any, k: int, s: int, p: int, size: Any,
                    out: Any) -> list[tuple[Any, list[str]]]:
    """``(window index, checks)`` of the windows of one dim that may contain input
    position ``pos`` (``size``: the input's extent, ``out``: the output's)."""
    i64 = torch.int64
    # the first candidate, ceil((pos + p - k + 1) / s), computed on a numerator made
    # non-negative by ``shift`` windows (index division truncates in some codegens)
    shift = max(0, -(-(k - s - p) // s))
    first = floordiv(add(pos, p - k + s + s * shift), s)
    last = floordiv(add(pos, p), s)
    # the last window any input position lies in, when the sizes are known: past it the
    # output's own bound needs no check
    top = (size - 1 + p) // s if type(size) is int else None
    found = []
    for j in range(-(-k // s)):
        o = add(first, j - shift)
        checks = []
        v = b.index_value(o)
        if j < shift:
            checks.append(b.compute("ge", v, b.literal(0, i64)))
        if j > 0 or k < s:  # the first candidate is a window whenever k >= s
            checks.append(b.compute("le", v, b.index_value(last)))
        if not (top is not None and type(out) is int and top < out):
            checks.append(b.compute("lt", v, b.literal(out, i64)))
        found.append((o, checks))
    return found


def covering_windows(b: BodyBuilder, window: Window, pos: Position, plane: Sequence[Any],
                     out_plane: Sequence[Any]) -> list[Candidate]:
    """``(window position, mask)`` of each candidate window containing input position
    ``pos`` (module doc), the first spatial dim slowest; ``mask`` is None where the
    candidate always is such a window. Needs :func:`gather_windows`."""
    per_dim = [
        _dim_candidates(b, q, k, s, p, size, out)
        for q, k, s, p, size, out in zip(pos, window.kernel, window.stride, window.padding,
                                         plane, out_plane)]
    found: list[Candidate] = []
    for combo in itertools.product(*per_dim):
        checks = [c for _, cs in combo for c in cs]
        found.append((tuple(o for o, _ in combo), b.all_of(*checks) if checks else None))
    return found


__all__ = ["GATHER_LAYOUTS", "covering_windows", "gather_windows", "gathered_input"]
