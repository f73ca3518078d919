"""Checks eager makes on an in-place write that the capture's fake tensors do not.

The capture records ``x.mul_(1.5)`` on an ``int32`` ``x``, and ``x[1:] += x[:-1]``, as
any other in-place op: the meta kernels it runs on check neither. Eager raises on both
("result type Float can't be cast to the desired output type Int", "unsupported
operation: some elements of the input tensor and the written-to tensor refer to a single
memory location"). Functionalized, both would compute something silently. The
functionalizer calls :func:`check_write` on each in-place op; a write eager refuses
declines the graph (``StageDeclined``), which then runs eagerly and raises as eager does.

The overlap rule is eager's: a written tensor and a tensor the op reads, in one storage,
both dense and static, overlap *partly* when their byte ranges meet but they are not the
same view (same offset, sizes and strides). Tensors with holes or internal overlap pass,
as eager lets them pass. With symbolic sizes, two dense views whose ranges may meet for
some sizes decline the graph: its eager run checks the sizes it is called with.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import sympy
import torch
from ember.aot.input_overlap import layout
from ember.aot.symbolic_sizes import is_static_meta, nbytes
from ember.runtime.ir import Node, TensorMeta, ValueRef, symbolic
from ember.runtime.stages import StageDeclined


def check_write(node: Node, written: tuple[int, ...], writes: tuple[tuple[int, int | None], ...],
                result_meta: Any, metas: dict[ValueRef, Any],
                storage_of: Callable[[ValueRef], int | None]) -> None:
    """Decline ``node`` (module doc) when a tensor it writes (``written`` positions of its
    ``writes``: position -> index into ``result_meta``, the functional op's meta) cannot
    hold its result's dtype, or partly overlaps a tensor argument it reads. ``metas``
    holds the source graph's metas and ``storage_of`` says which storage a value lives in.

    Raises:
        StageDeclined: naming the op and the refused write.
    """
    for position, result in writes:
        target = node.args[position] if position < len(node.args) else None
        if position not in written or not isinstance(target, ValueRef):
            continue
        target_meta = metas.get(target)
        value = result_meta[result or 0] if isinstance(result_meta, tuple) else result_meta
        if (isinstance(target_meta, TensorMeta) and isinstance(value, TensorMeta)
                and not torch.can_cast(value.dtype, target_meta.dtype)):
            raise StageDeclined(
                f"%{node.name} ({node.target}) writes its {value.dtype} result into a "
                f"{target_meta.dtype} tensor, a cast eager refuses (the graph runs eagerly "
                "and raises there)")
        storage = storage_of(target)
        if storage is None or not isinstance(target_meta, TensorMeta):
            continue
        for read in (*node.args, *node.kwargs.values()):
            if (isinstance(read, ValueRef) and read != target and storage_of(read) == storage
                    and _partly_overlap(target_meta, metas.get(read))):
                raise StageDeclined(
                    f"%{node.name} ({node.target}) writes %{target.node} while reading "
                    f"%{read.node}, which partly overlaps it in memory: eager refuses such "
                    "a write (the graph runs eagerly and raises there)")


def _partly_overlap(a: TensorMeta, b: Any) -> bool:
    if not isinstance(b, TensorMeta):
        return False
    if a.dtype.itemsize == b.dtype.itemsize and layout(a) == layout(b):
        return False  # the same view: eager's full overlap, allowed (x.add_(x))
    if not (is_static_meta(a) and is_static_meta(b)):
        return _may_partly_overlap(a, b)
    if not (_dense(a) and _dense(b)):
        return False
    a_lo, a_hi = _byte_range(a)
    b_lo, b_hi = _byte_range(b)
    return a_lo < b_hi and b_lo < a_hi


def _may_partly_overlap(a: TensorMeta, b: TensorMeta) -> bool:
    """:func:`_partly_overlap` over symbolic sizes: both dense (their strides a
    permutation of a contiguous layout's, as expressions), and their byte ranges not
    provably apart for every size (``x[1:] += x[:-1]`` meets for any length above 2,
    ``x += x.t()`` always): the graph runs eagerly, which checks the sizes it gets."""
    if not (_symbolically_dense(a) and _symbolically_dense(b)):
        return False
    (a_lo, a_hi), (b_lo, b_hi) = _symbolic_byte_range(a), _symbolic_byte_range(b)
    return not (_provably_at_most(a_hi, b_lo) or _provably_at_most(b_hi, a_lo))


def _symbolically_dense(meta: TensorMeta) -> bool:
    dims = [(symbolic.parse(n), symbolic.parse(s)) for n, s in zip(meta.sizes, meta.strides)
            if n != 1]
    if len(dims) > 6:  # too many orders to try: judged as eager judges a hard case
        return False
    for order in itertools.permutations(range(len(dims))):
        expected: sympy.Expr = sympy.Integer(1)
        for d in reversed(order):
            if sympy.expand(dims[d][1] - expected) != 0:
                break
            expected = expected * dims[d][0]
        else:
            return True
    return False


def _symbolic_byte_range(meta: TensorMeta) -> tuple[sympy.Expr, sympy.Expr]:
    start = symbolic.parse(meta.storage_offset) * meta.dtype.itemsize
    return start, start + symbolic.parse(nbytes(meta))


def _provably_at_most(x: sympy.Expr, y: sympy.Expr) -> bool:
    """Whether ``x <= y`` for every value >= 1 of their symbols."""
    gap = sympy.expand(y - x)
    positive = {s: sympy.Dummy(s.name, integer=True, positive=True)
                for s in gap.free_symbols if isinstance(s, sympy.Symbol)}
    return bool(gap.xreplace(positive).is_nonnegative)


def _dense(meta: TensorMeta) -> bool:
    """Static, non-empty and without holes or internal overlap: its elements fill its
    range exactly (strides a permutation of a contiguous layout's)."""
    if not is_static_meta(meta) or meta.numel == 0:
        return False
    expected = 1
    for size, stride in sorted(((int(n), int(s)) for n, s in zip(meta.sizes, meta.strides)
                                if int(n) != 1), key=lambda p: p[1]):
        if stride != expected:
            return False
        expected *= size
    return True


def _byte_range(meta: TensorMeta) -> tuple[int, int]:
    start = int(meta.storage_offset) * meta.dtype.itemsize
    return start, start + int(meta.numel) * meta.dtype.itemsize
