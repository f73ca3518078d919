"""Which way a reduction kernel's data is laid out: along its rows or across them.

A reduction whose big loads are contiguous along the *outer* index (``x.sum(0)`` of a
row-major ``x``; a norm's weight gradient, summed over all rows per feature) is a
*column* reduction: its tiles are a few outer points wide and walk the reduction
(``heuristics.choose_config(columns=True)``). The decision reads the loads' index
expressions:

======================================  ==============================================
loads considered                        those reading both an outer and a reduction
                                        variable (the tensor-sized operands); when
                                        none does, every load reading a reduction
                                        variable
column reduction when                   some considered load has unit stride along an
                                        outer variable, none along a reduction one
its element size                        the smallest of those loads' element sizes
                                        (the tile's width is one 128-byte segment of
                                        them: ``heuristics.COLUMN_XBLOCKS``)
======================================  ==============================================

Loads of one value per reduction row (a LayerNorm's saved mean and rstd, read in the
weight gradient as ``rstd[r0]``) are unit-stride along the reduction but are read once
per tile column and broadcast; they do not decide the layout when a tensor-sized load
exists.
"""

from __future__ import annotations

from ember.inductor.codegen.triton.ranges import linear_form
from ember.inductor.loop_ir import Kernel, Load


def column_element_bytes(kernel: Kernel) -> int:
    """0 when ``kernel`` is not a column reduction (module doc), else the element size
    in bytes of its loads contiguous along the outer index."""
    outer = {v.name for v in kernel.ranges}
    inner = {v.name for v in kernel.reduction_ranges}
    reading: list[tuple[Load, set[str], bool]] = []  # (load, unit-stride vars, reads outer)
    for s in kernel.body:
        if not isinstance(s, Load):
            continue
        form = linear_form(s.index)
        if form is None:
            continue
        coeffs = form[0]
        if not any(coeffs.get(n, 0) for n in inner):
            continue
        unit = {name for name, c in coeffs.items() if abs(c) == 1}
        reading.append((s, unit, any(coeffs.get(n, 0) for n in outer)))
    two_d = [r for r in reading if r[2]]
    considered = two_d or reading
    if any(unit & inner for _, unit, _ in considered):
        return 0
    sizes = [load.dtype.itemsize for load, unit, _ in considered if unit & outer]
    return min(sizes) if sizes else 0


def reduces_columns(kernel: Kernel) -> bool:
    """Whether a reduction kernel is a column reduction (module doc): its tensor-sized
    loads are contiguous along an outer variable and not along a reduction variable
    (``x.sum(0)`` of a row-major ``x``)."""
    return column_element_bytes(kernel) > 0
