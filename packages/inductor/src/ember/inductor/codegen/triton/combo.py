"""Combo kernels: a pointwise kernel of independent parts runs one part per program.

Horizontal fusion (``scheduler.py``) puts independent nodes over one iteration space into
one kernel, so one launch serves them all (an optimizer step's update of every
same-shaped parameter). Written in lockstep, every program would do every part's work
for its block of the space, one part after the other: over small arrays that leaves a
handful of programs on a GPU of 132 multiprocessors (24 biases of 2048 elements: 2
programs, 62 us on the H200 where each part alone takes a few), and over large ones a
program streams dozens of arrays. So the Triton writer splits such a kernel into its
*parts* and launches ``blocks x parts`` programs: ``tl.program_id(1)`` picks the part,
and each program runs that part's statements alone (``if part == i:`` blocks).

Parts are the connected components of the kernel body:

- two statements are connected when one reads the other's value;
- statements touching the same tensor buffer are connected (a buffer one part writes
  and another reads, or one read by both: lockstep loads it once);
- *constants* belong to no part: literals, host scalars (``lowering/host_scalars.py``),
  single-element loads and values computed from constants only (Adam's bias
  corrections). Each part's block computes again the constants it needs.

A kernel with one part, a reduction, or a part count above :data:`MAX_PARTS` (the
grid's second dimension) is written as before.
"""

from __future__ import annotations

from ember.inductor.loop_ir import Compute, IndexValue, Kernel, Literal, Load, Stmt, Store
from ember.inductor.loop_ir.body import stmt_inputs
from ember.inductor.loop_ir.index import IndexExpr, free_vars, indirect_values

#: CUDA's limit on a grid's second dimension
MAX_PARTS = 65535


def _has_axes(index: IndexExpr) -> bool:
    """Whether ``index`` may differ between elements: it has a loop variable or reads
    a value (an indirect index)."""
    return next(free_vars(index), None) is not None or next(indirect_values(index), None) \
        is not None


def _constants(kernel: Kernel) -> set[str]:
    """The names of the body's values that are the same in every program: literals,
    host scalars, one-address loads and values computed from these alone."""
    host = {b.name for b in kernel.buffers if b.host}
    constant: set[str] = set()
    for s in kernel.body:
        if isinstance(s, Literal):
            constant.add(s.name)
        elif isinstance(s, Load) and s.mask is None and (
                s.buffer in host or not _has_axes(s.index)):
            constant.add(s.name)
        elif isinstance(s, IndexValue) and not _has_axes(s.index):
            constant.add(s.name)
        elif isinstance(s, Compute) and all(a in constant for a in s.args):
            constant.add(s.name)
    return constant


def _name(s: Stmt) -> str | None:
    return None if isinstance(s, Store) else s.name


def combo_parts(kernel: Kernel) -> list[list[Stmt]] | None:
    """The statements of each part of ``kernel`` in body order, each part's constants
    first where they appear; None when the kernel is not written as a combo."""
    if kernel.is_reduction or kernel.template is not None:
        return None
    body = kernel.body
    constant = _constants(kernel)
    parent = list(range(len(body)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i: int, j: int) -> None:
        parent[find(i)] = find(j)

    producer: dict[str, int] = {}
    by_buffer: dict[str, int] = {}
    members = [i for i, s in enumerate(body) if _name(s) not in constant]
    for i in members:
        s = body[i]
        for arg in stmt_inputs(s):
            if arg in producer:
                union(i, producer[arg])
        if isinstance(s, (Load, Store)):
            if s.buffer in by_buffer:
                union(i, by_buffer[s.buffer])
            by_buffer[s.buffer] = i
        name = _name(s)
        if name is not None:
            producer[name] = i
    roots: dict[int, list[int]] = {}
    for i in members:
        roots.setdefault(find(i), []).append(i)
    if not 2 <= len(roots) <= MAX_PARTS:
        return None
    defining = {s.name: i for i, s in enumerate(body) if not isinstance(s, Store)}
    parts = []
    for indexes in roots.values():
        needed: set[int] = set(indexes)
        stack = [a for i in indexes for a in stmt_inputs(body[i]) if a in constant]
        while stack:
            j = defining[stack.pop()]
            if j not in needed:
                needed.add(j)
                stack.extend(a for a in stmt_inputs(body[j]) if a in constant)
        parts.append([body[i] for i in sorted(needed)])
    return parts


__all__ = ["MAX_PARTS", "combo_parts"]
