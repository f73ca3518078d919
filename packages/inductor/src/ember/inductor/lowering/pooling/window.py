"""A pooling window over the last N spatial dims of a tensor (N = 2: height, width;
N = 3: depth, height, width) and how its elements are loaded: shared by max, average
and adaptive pooling.

A window's elements are unrolled into the element function of an output position (at
most :data:`MAX_WINDOW` of them), in eager's order (the first spatial dim slowest),
each masked where it may lie in the padding. A bounds check that holds for every
output position is not emitted, and an element at most one step past the input is read
at its neighbour in the same window (:meth:`Window.neighbour`), so that most windows
load without masks.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from ember.inductor.loop_ir import Compute, IndexExpr, Int, add, floordiv, mul
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.registry import NotLowerable
from ember.inductor.lowering.values import Lazy, TensorValue, probe

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering

# The largest window unrolled into an element function (7 x 7 and 4 x 4 x 4 and below:
# every common pooling layer).
MAX_WINDOW = 64

# A computed input that overlapping windows read (a 3x3 window of stride 2 reads each
# element 2.25 times on average) is stored first when one element of it takes more than
# this many operations: inlined, a batch norm's ``sub, add, sqrt, div, mul, mul, add,
# relu`` ran once a window position, masked at the padding and unvectorized
# (torchvision ResNet-18's stem: 19 ms of a 68 ms call, one thread). A cheap producer
# (a relu) stays inlined: recomputing it costs less than a store and a load.
MAX_REREAD_OPS = 3

Ints = tuple[int, ...]
Position = tuple[IndexExpr, ...]


class Window(NamedTuple):
    """One pooling layer's geometry over the last ``len(kernel)`` dims."""

    kernel: Ints
    stride: Ints
    padding: Ints
    dilation: Ints

    @property
    def elements(self) -> int:
        return math.prod(self.kernel)

    def positions(self, out: Position) -> list[tuple[Ints, Position]]:
        """``(at, position)`` for every window element ``at`` of output position
        ``out``, in eager's order (the first dim slowest, the last fastest)."""
        found = []
        for at in itertools.product(*(range(k) for k in self.kernel)):
            found.append((at, tuple(
                add(mul(o, s), k * d - p)
                for o, k, s, p, d in zip(out, at, self.stride, self.padding, self.dilation))))
        return found

    def checks(self, at: Ints, out: Sequence[Any], plane: Sequence[Any]) -> tuple[bool, ...]:
        """Which of ``pos >= 0, pos < size`` (for each dim, in order) window element
        ``at`` can fail for some output position (``out``: the output's sizes over the
        spatial dims, ``plane``: the input's). A check that holds for every position is
        not emitted: without padding the window's loads need no mask (they vectorize)."""
        needed: list[bool] = []
        for k, n, size, s, p, d in zip(at, out, plane, self.stride, self.padding,
                                       self.dilation):
            first = k * d - p
            static = type(n) is int and type(size) is int
            needed += [first < 0, not (static and (n - 1) * s + first < size)]
        return tuple(needed)

    def never_inside(self, at: Ints, out: Sequence[Any], plane: Sequence[Any]) -> bool:
        """Whether window element ``at`` lies outside the input for every output position
        (in some dim, each of them puts it in the padding): it adds nothing to any
        window, and is left out (no check on a constant position is emitted)."""
        for k, n, size, s, p, d in zip(at, out, plane, self.stride, self.padding,
                                       self.dilation):
            first = k * d - p
            if (type(size) is int and first >= size) or (type(n) is int
                                                         and (n - 1) * s + first < 0):
                return True
        return False

    def neighbour(self, at: Ints, pos: Position, needed: tuple[bool, ...],
                  out: Sequence[Any], plane: Sequence[Any]
                  ) -> tuple[Position, tuple[bool, ...]]:
        """A window element at most one step outside the input read at its neighbour in
        the same window instead (``p + 1 - (p + n) // n`` maps -1 to 0 and n to n - 1):
        a max does not change with a value read twice, nor does eager's argmax (the
        copies of a slice of the window come just before or after it, in its order),
        and the load needs no mask: GCC 12 does not vectorize masked strided loads
        (ResNet's padded stem pool, SqueezeNet's ceil-mode pools). Returns the positions
        and the checks still needed."""
        new_pos, left = list(pos), list(needed)
        for a in range(len(pos)):
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
        return tuple(new_pos), tuple(left)


def spatial(v: Sequence[int] | int, dims: int, default: Sequence[int] | None = None
            ) -> Ints:
    """A pooling parameter (``kernel_size``, ``stride``, ...) as one int a spatial dim:
    an int or a one-element list is every dim's; an empty list is ``default``'s.

    Raises:
        NotLowerable: a list of another length.
    """
    if isinstance(v, int):
        return (v,) * dims
    seq = list(v) if v else list(default or ())
    if len(seq) == 1:
        return (seq[0],) * dims
    if len(seq) != dims or not all(isinstance(s, int) for s in seq):
        raise NotLowerable(f"pooling parameter {v!r}")
    return tuple(seq)


def make_window(dims: int, kernel: Any, stride: Any, padding: Any, dilation: Any = 1
                ) -> Window:
    """The window of a pooling call over ``dims`` spatial dims (an empty ``stride`` is
    the kernel's, as in eager).

    Raises:
        NotLowerable: a window of more than :data:`MAX_WINDOW` elements (unrolled, it
            would be too large a kernel: the op runs as a counted extern call).
    """
    k = spatial(kernel, dims)
    w = Window(k, spatial(stride, dims, k), spatial(padding, dims), spatial(dilation, dims))
    if w.elements > MAX_WINDOW:
        raise NotLowerable(f"pooling window {k} larger than {MAX_WINDOW} elements")
    return w


def check_input(x: TensorValue, dims: int) -> None:
    """``x`` is a float tensor with ``dims`` spatial dims, batched or not.

    Raises:
        NotLowerable: another rank or dtype.
    """
    if len(x.sizes) not in (dims + 1, dims + 2):
        raise NotLowerable(f"{dims}-d pooling of a {len(x.sizes)}-d tensor")
    if not x.dtype.is_floating_point:
        raise NotLowerable(f"pooling of {x.dtype}")


def ops(x: Lazy) -> int:
    """How many operations computing one element of ``x`` takes."""
    return sum(isinstance(s, Compute) for s in probe(x).stmts)


def window_input(ctx: GraphLowering, x: TensorValue, window: Window,
                 limit: int = MAX_REREAD_OPS) -> TensorValue:
    """``x`` as the pooling op reads it: stored first when windows overlap and it costs
    more than ``limit`` operations an element (see :data:`MAX_REREAD_OPS`)."""
    if (not isinstance(x, Lazy) or ctx.is_realized(x)
            or window.elements <= math.prod(window.stride)):
        return x
    return ctx.realize(x) if ops(x) > limit else x


def inside(b: BodyBuilder, pos: Position, plane: Sequence[Any],
           needed: tuple[bool, ...] | None = None) -> str | None:
    """A bool value: whether ``pos`` lies in the input's spatial dims ``plane``; only
    the ``needed`` checks (:meth:`Window.checks`; None: all), None when none is (a
    constant position is checked here: a literal False when it is outside)."""
    i64 = torch.int64
    conds = []
    for k, (p, size) in enumerate(zip(pos, plane)):
        low, high = (True, True) if needed is None else needed[2 * k:2 * k + 2]
        if isinstance(p, Int) and type(size) is int:  # known now
            if (low or high) and not 0 <= p.value < size:
                return b.literal(False, torch.bool)
        elif low or high:
            v = b.index_value(p)
            if low:
                conds.append(b.compute("ge", v, b.literal(0, i64)))
            if high:
                conds.append(b.compute("lt", v, b.literal(size, i64)))
    return b.all_of(*conds) if conds else None


def load_inside(b: BodyBuilder, x: TensorValue, lead: Position, pos: Position,
                mask: str | None, ct: torch.dtype) -> str:
    """``x[*lead, *pos]`` as ``ct``, loaded only where ``mask`` holds (if it is a check
    at all)."""
    if mask is None:
        return b.cast(x.element(b, (*lead, *pos)), ct)
    with b.masked(mask):
        return b.cast(x.element(b, (*lead, *pos)), ct)


def product(b: BodyBuilder, first: str, *rest: str) -> str:
    """The value ``first * rest[0] * ...`` (folded left; ``mul`` takes two operands)."""
    for v in rest:
        first = b.compute("mul", first, v)
    return first


def flat_position(pos: Position, plane: Sequence[Any]) -> IndexExpr:
    """The flat index of ``pos`` in the row-major ``plane`` (eager's argmax)."""
    flat = pos[0]
    for p, size in zip(pos[1:], plane[1:]):
        flat = add(mul(flat, size), p)
    return flat


__all__ = ["MAX_REREAD_OPS", "MAX_WINDOW", "Window", "check_input", "flat_position",
           "inside", "load_inside", "make_window", "ops", "product", "spatial", "window_input"]
