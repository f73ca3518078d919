"""Memory layouts the lowering chooses: dense permutations of row-major, and the
channels-last layout convolutions run fastest with.

A buffer stored in a dense non-row-major layout (channels-last ``N, C, H, W`` with
strides ``(HWC, 1, WC, C)``, or a transposed graph output) is computed by a kernel whose
loops run in *storage order* (``N, H, W, C``), so every store is sequential; consumers
see it through a :class:`~ember.inductor.lowering.values.Stored` view with the logical
sizes and the permuted strides.
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.inductor.lowering.values import contiguous_strides


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
