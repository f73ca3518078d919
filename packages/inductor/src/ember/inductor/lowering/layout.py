"""Memory layouts the lowering chooses: dense permutations of row-major, and the
channels-last layout convolutions run fastest with.

A buffer stored in a dense non-row-major layout (channels-last ``N, C, H, W`` with
strides ``(HWC, 1, WC, C)``, or a transposed graph output) is computed by a kernel whose
loops run in *storage order* (``N, H, W, C``), so every store is sequential; consumers
see it through a :class:`~ember.inductor.lowering.values.Stored` view with the logical
sizes and the permuted strides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ember.inductor.loop_ir import Add, Var
from ember.inductor.lowering.values import Lazy, Stored, contiguous_strides, numel, probe_index
from ember.runtime.ir import TensorMeta

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering


def same_layout(sizes: Sequence[int], a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether strides ``a`` and ``b`` address ``sizes`` identically (a dim of size 1
    may have any stride)."""
    return all(n == 1 or x == y for n, x, y in zip(sizes, a, b))


def storage_order(sizes: Sequence[int], strides: Sequence[int]) -> tuple[int, ...] | None:
    """The dims from outermost to innermost in memory when ``strides`` lay ``sizes``
    out densely (a permutation of row-major), else None. Ties (dims of size 1) keep
    their logical order."""
    order = tuple(sorted(range(len(sizes)), key=lambda d: (-strides[d], d)))
    expected = 1
    for d in reversed(order):
        if sizes[d] != 1 and strides[d] != expected:
            return None
        expected *= sizes[d]
    return order


def channels_last_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """The channels-last strides of a 4-d ``N, C, H, W`` shape."""
    n, c, h, w = sizes
    del n
    return (h * w * c, 1, w * c, c)


def is_channels_last(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether a 4-d layout is channels-last and not also row-major (what ATen's
    convolutions take as a request for a channels-last result)."""
    return (len(sizes) == 4
            and same_layout(sizes, strides, channels_last_strides(sizes))
            and not same_layout(sizes, strides, contiguous_strides(sizes)))


def is_dense(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether ``strides`` lay ``sizes`` out densely (a permutation of contiguous)."""
    dims = sorted((st, sz) for sz, st in zip(sizes, strides) if sz != 1)
    expected = 1
    for st, sz in dims:
        if st != expected:
            return False
        expected *= sz
    return True


def channels_last_convolution(ctx: GraphLowering, args: list[Any],
                              metas: tuple[Any, ...]) -> tuple[Any, ...]:
    """Layout optimization for a 2-d convolution: its input, when a kernel computes
    it, is stored channels-last, and ATen's convolution then returns a
    channels-last result (the meta returned says so). Vendor convolutions run
    faster on channels-last data (on CPU: no reorder into the blocked format; on the
    H200 cuDNN ran the zoo's ResNet about 1.5x faster in float32 and bfloat16).
    """
    x, meta = args[0], metas[0]
    if (len(args) < 9 or args[6] or not isinstance(meta, TensorMeta)
            or not isinstance(x, (Lazy, Stored)) or len(x.sizes) != 4
            or not meta.dtype.is_floating_point):
        return metas
    if isinstance(x, Lazy) or not is_channels_last(x.sizes, x.strides):
        x = args[0] = channels_last(ctx, x)
    sizes = tuple(int(s) for s in meta.sizes)
    strides = channels_last_strides(sizes)
    return (dataclasses.replace(meta, sizes=sizes, strides=strides),)


def channels_last(ctx: GraphLowering, x: Lazy | Stored) -> Stored:
    """``x`` in a channels-last buffer: a Lazy is computed into one; a stored tensor
    is copied once (the copy is reused by every later convolution of it)."""
    strides = channels_last_strides(x.sizes)
    if isinstance(x, Lazy):
        return ctx.realize(x, strides=strides, reuse=True)
    key = (x.buffer, x.sizes, x.strides, x.offset)
    copy = ctx.channels_last_copies.get(key)
    if copy is None:
        copy = ctx.realize(Lazy(x.element, x.dtype, x.sizes), strides=strides)
        ctx.channels_last_copies[key] = copy
    return copy


def matmul_operand(ctx: GraphLowering, value: Any) -> Any:
    """A computed matmul operand that reads its inputs transposed (a weight
    gradient's ``x.t()`` of an activation computed in the backward) is stored
    transposed: its kernel then reads and writes contiguously (and vectorizes), and
    the matmul takes the transposed view at no cost. Other values are returned as is."""
    if (not isinstance(value, Lazy) or len(value.sizes) not in (2, 3)
            or id(value) in ctx._realized or min(value.sizes) == 1):
        return value
    n = len(value.sizes)
    if unit_stride_dim(ctx, value) != n - 2:
        return value
    rows, cols = value.sizes[-2:]
    strides = (*((rows * cols,) if n == 3 else ()), 1, rows)
    return ctx.realize(value, strides=strides, reuse=True)

def unit_stride_dim(ctx: GraphLowering, value: Lazy) -> int | None:
    """The dim of ``value`` along which its largest input is read contiguously
    (its loop variable a plain term of the load's index), if one is."""
    loads = [(numel(ctx.buffers[buf].sizes), ix)
             for buf, ix in ctx._external_loads(value)[0] if buf in ctx.buffers]
    if not loads:
        return None
    _, ix = max(loads, key=lambda t: t[0])
    terms = ix.terms if isinstance(ix, Add) else (ix,)
    for d, v in enumerate(probe_index(value.sizes)):
        if isinstance(v, Var) and v in terms:
            return d
    return None
