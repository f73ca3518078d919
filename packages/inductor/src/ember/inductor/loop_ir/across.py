"""Kernels with reductions across their outer ranges (``Reduce.across``): a row kernel that
also sums columns.

A norm's backward reads ``x`` and ``dy`` row by row for ``dx`` (row sums) and column by
column for its weight gradient (column sums). Fused (:mod:`ember.inductor.mixed`), one
kernel over rows ``x`` and columns ``r`` holds both: its ``across`` reductions sum their
argument over the rows. :func:`across_parts` splits such a body into what a backend
runs per row block (the row kernel, the across reductions' arguments included), the
across reductions, and the statements that read their results (over the columns only,
run once every row is done).
"""

from __future__ import annotations

from dataclasses import dataclass

from ember.inductor.loop_ir.body import Reduce, Stmt, Store, stmt_inputs
from ember.inductor.loop_ir.index import free_vars
from ember.inductor.loop_ir.kernel import Kernel


@dataclass(frozen=True)
class AcrossParts:
    """A kernel's body split for a backend (module doc)."""

    rows: tuple[Stmt, ...]
    """The row kernel: every statement but the across reductions and what reads them."""
    reduces: tuple[Reduce, ...]
    """The across reductions, in body order."""
    columns: tuple[Stmt, ...]
    """The statements reading the across results (and the column values they read, such
    as a weight's load), over the reduction variables only."""


def has_across(kernel: Kernel) -> bool:
    """Whether ``kernel`` holds a reduction across its outer ranges."""
    return any(isinstance(s, Reduce) and s.across for s in kernel.body)


def across_parts(kernel: Kernel) -> AcrossParts | None:
    """``kernel``'s body split (module doc), or None when it cannot run that way: an
    across result read by a value that varies with the rows (an outer variable in its
    index, a row reduction's result among its inputs), or an across reduction reading
    another's result. A kernel without across reductions gives None too."""
    reduces = tuple(s for s in kernel.body if isinstance(s, Reduce) and s.across)
    if not reduces or not kernel.is_reduction:
        return None
    outer = {v.name for v in kernel.ranges}
    defs = {s.name: s for s in kernel.body if not isinstance(s, Store)}
    varying: set[str] = set()  # values that change from row to row
    after: set[str] = {r.name for r in reduces}  # values known once every row is done
    for s in kernel.body:
        if isinstance(s, Store):
            continue
        inputs = stmt_inputs(s)
        if isinstance(s, Reduce):
            if s.across:
                if s.arg in after:
                    return None
            else:
                varying.add(s.name)  # one value a row
                if s.arg in after:
                    return None
            continue
        index = getattr(s, "index", None)
        if (index is not None and any(v.name in outer for v in free_vars(index))) or any(
                a in varying for a in inputs):
            varying.add(s.name)
        if any(a in after for a in inputs):
            after.add(s.name)
    if after & varying:
        return None
    roots = [s for s in kernel.body if isinstance(s, Store)
             and any(a in after for a in stmt_inputs(s))]
    for s in roots:
        if any(v.name in outer for v in free_vars(s.index)) or any(
                a in varying for a in stmt_inputs(s)):
            return None
    needed: set[str] = set()
    stack = [a for s in roots for a in stmt_inputs(s)]
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        if name in varying:
            return None  # a column statement reading a row value
        s = defs[name]
        if not (isinstance(s, Reduce) and s.across):
            stack.extend(stmt_inputs(s))
    columns = tuple(s for s in kernel.body if s in roots or (
        not isinstance(s, Store) and s.name in needed
        and not (isinstance(s, Reduce) and s.across)))
    rows = tuple(s for s in kernel.body if not (isinstance(s, Reduce) and s.across)
                 and not (isinstance(s, Store) and s in roots)
                 and not (not isinstance(s, Store) and s.name in after))
    return AcrossParts(rows, reduces, columns)


__all__ = ["AcrossParts", "across_parts", "has_across"]
