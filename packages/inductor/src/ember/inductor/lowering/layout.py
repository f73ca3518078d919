"""Memory layouts the lowering chooses: dense permutations of row-major, and the
channels-last layout convolutions run fastest with.

A buffer stored in a dense non-row-major layout (channels-last ``N, C, H, W`` with
strides ``(HWC, 1, WC, C)``, or a transposed graph output) is computed by a kernel whose
loops run in *storage order* (``N, H, W, C``), so every store is sequential; consumers
see it through a :class:`~ember.inductor.lowering.values.Stored` view with the logical
sizes and the permuted strides.

The choices: :class:`LayoutState` (a value computed from a channels-last buffer is stored
channels-last too), and the lowering passes of :mod:`.layout_passes` (convolutions on
channels-last data, matmul operands stored transposed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from ember.inductor.loop_ir import Size
from ember.inductor.loop_ir.symbolic_index import as_size, from_ir, hint, same_size, stride_from_ir
from ember.inductor.lowering.values import Lazy, Stored, contiguous_strides
from ember.runtime.ir import Program, TensorMeta, ValueRef

if TYPE_CHECKING:  # NOTE: lowering.context imports buffers, which imports this package
    from ember.inductor.lowering.context import LoweringContext


def meta_layout(meta: TensorMeta) -> tuple[tuple[Size, ...], tuple[Size, ...], Size]:
    """A tensor meta's sizes, strides and storage offset as loop-IR sizes (ints, or
    sympy expressions over the graph's size symbols)."""
    return (tuple(from_ir(s) for s in meta.sizes), tuple(stride_from_ir(s) for s in meta.strides),
            from_ir(meta.storage_offset))


def same_layout(sizes: Sequence[int], a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether strides ``a`` and ``b`` address ``sizes`` identically (a dim of size 1
    may have any stride)."""
    return all(n == 1 or same_size(x, y) for n, x, y in zip(sizes, a, b))


def storage_order(sizes: Sequence[int], strides: Sequence[int]) -> tuple[int, ...] | None:
    """The dims from outermost to innermost in memory when ``strides`` lay ``sizes``
    out densely (a permutation of row-major), else None. Ties (dims of size 1) keep
    their logical order."""
    # NOTE: symbolic strides are ordered at their hints; the density test below is exact
    order = tuple(sorted(range(len(sizes)), key=lambda d: (-hint(strides[d]), d)))
    expected = 1
    for d in reversed(order):
        if sizes[d] != 1 and not same_size(strides[d], expected):
            return None
        expected *= sizes[d]
    return order


def column_major_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """The strides of a 2-d ``rows, cols`` (or batched 3-d) shape stored transposed: each
    matrix column-major, the batch dim outermost."""
    rows, cols = sizes[-2:]
    return (*((rows * cols,) if len(sizes) == 3 else ()), 1, rows)


def channels_last_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """The channels-last strides of a 4-d ``N, C, H, W`` shape."""
    n, c, h, w = sizes
    del n
    # expanded when symbolic, so that they compare equal to the strides of a meta
    return tuple(as_size(s) if not isinstance(s, int) else s for s in (h * w * c, 1, w * c, c))


def is_channels_last(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether a 4-d layout is channels-last and not also row-major (what ATen's
    convolutions take as a request for a channels-last result)."""
    return (len(sizes) == 4
            and same_layout(sizes, strides, channels_last_strides(sizes))
            and not same_layout(sizes, strides, contiguous_strides(sizes)))


def is_dense(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether ``strides`` lay ``sizes`` out densely (a permutation of contiguous)."""
    dims = sorted(((st, sz) for sz, st in zip(sizes, strides) if sz != 1),
                  key=lambda p: (hint(p[0]), hint(p[1])))
    expected = 1
    for st, sz in dims:
        if not same_size(st, expected):
            return False
        expected *= sz
    return True


def in_traced_layout(ctx: LoweringContext, ref: object, value: object) -> object:
    """``value`` (the lowered argument ``ref`` of a call into code Ember does not see
    inside: a custom operator, a user Triton kernel) in the sizes and strides the program
    traced for it, which is what that code met when it was traced (a Lazy value, or a
    stored view with other strides, such as an ``expand`` the lowering made of a
    ``clone``, is computed into a buffer of that layout). A layout with gaps is left as
    it is (it cannot be recomputed)."""
    meta = ctx.traced_meta(ref)
    if meta is None or not isinstance(value, (Lazy, Stored)):
        return value
    sizes = tuple(from_ir(s) for s in meta.sizes)
    strides = tuple(stride_from_ir(s) for s in meta.strides)
    if isinstance(value, Stored) and same_layout(sizes, value.strides, strides):
        return value  # already in that layout (a view of a buffer too)
    if not is_dense(sizes, strides):
        return value
    lazy = value if isinstance(value, Lazy) else Lazy(value.element, value.dtype,
                                                      value.sizes)
    return ctx.realize(lazy, strides=strides, reuse=False)


class LayoutState:
    """The layouts one graph's lowering chose: which buffers are stored channels-last, and
    the channels-last copies made of stored tensors (one per tensor)."""

    def __init__(self) -> None:
        self.channels_last_buffers: set[str] = set()
        self.channels_last_copies: dict[tuple[Any, ...], Stored] = {}
        self._saved_channels_last: set[str] | None = None

    def saved_channels_last(self, program: Program, ref: object) -> bool:
        """Whether ``ref`` (a node argument) is a forward input the layout plan saves
        channels-last for the backward (a ``clone`` of it to channels-last exists)."""
        if self._saved_channels_last is None:
            graph = program.graphs.get("forward")
            self._saved_channels_last = set() if graph is None else {
                n.args[0].node for n in graph.calls()
                if n.target == "aten::clone.default" and isinstance(n.args[0], ValueRef)
                and n.kwargs.get("memory_format") == torch.channels_last}
        return isinstance(ref, ValueRef) and ref.node in self._saved_channels_last

    def note_buffer(self, name: str, sizes: tuple[int, ...], strides: tuple[int, ...]) -> None:
        """Record the layout of a new buffer."""
        if is_channels_last(sizes, strides):
            self.channels_last_buffers.add(name)

    def copy_in(self, x: Stored, meta: object) -> Stored | None:
        """The channels-last copy made of ``x`` (for a convolution) when ``meta``, the
        traced meta of a graph output reading ``x``, asks for exactly that layout (a
        graph input the layout plan saves channels-last): the output reuses it."""
        copy = self.channels_last_copies.get((x.buffer, x.sizes, x.strides, x.offset))
        if copy is None or not isinstance(meta, TensorMeta):
            return None
        strides = tuple(stride_from_ir(s) for s in meta.strides)
        return copy if same_layout(copy.sizes, copy.strides, strides) else None

    def default_strides(self, sizes: tuple[int, ...],
                        loaded_buffers: Callable[[], set[str]]) -> tuple[int, ...]:
        """The strides of a value of ``sizes`` computed from ``loaded_buffers()``:
        row-major, except a 4-d value computed from a channels-last buffer (a
        convolution's result, or the input stored for one): it is stored channels-last
        too, so the kernels between convolutions never transpose. 4-d tensors that do
        not come from convolutions (attention heads) stay row-major."""
        if (len(sizes) == 4 and self.channels_last_buffers
                and loaded_buffers() & self.channels_last_buffers):
            return channels_last_strides(sizes)
        return contiguous_strides(sizes)
