"""A row reduction and a column reduction over the same elements share one kernel.

A LayerNorm or RMSNorm backward reads ``x`` and ``dy`` twice: a row kernel sums along
each row for ``dx``, and a column kernel sums down the rows for the weight (and bias)
gradients. :func:`mixing` fuses a reduction whose iteration space is another reduction
group's transposed (``outer, reduction`` swapped) into one group over the rows: the
column sums become ``across`` reductions (``Reduce.across``) in the row kernel, which
reads each element once. The backend must run such kernels
(``KernelBackend.across_reductions``) and may refuse one (``can_fuse``: Triton runs them
only where whole rows fit its registers; ``loop_ir/across.py`` says which bodies can).
The scheduler asks when a reduction fits no group and takes in no producer; a pointwise
node over the columns that reads the sums then joins the group too
(:func:`column_placement`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.inductor.buffers import ExternCall, LoopNode, PointwiseBuffer, ReductionBuffer
from ember.inductor.codegen.backend import KernelBackend
from ember.inductor.kernel_group import Emit, KernelGroup, group_kernel, natural, squeezed
from ember.inductor.loop_ir import IndexExpr, Int, Kernel, Store
from ember.inductor.loop_ir.across import across_parts
from ember.inductor.lowering.builder import BodyBuilder


def swapped(emit: Emit) -> Emit:
    """``emit`` in a group whose outer and reduction variables are its own swapped: its
    reductions run across the group's outer ranges (twice swapped: as it was)."""
    def emit_swapped(b: BodyBuilder, xs: Sequence[IndexExpr], rs: Sequence[IndexExpr]
                     ) -> None:
        b.across = not b.across
        try:
            emit(b, rs, xs)
        finally:
            b.across = not b.across
    return emit_swapped


def column_placement(node: LoopNode, group: KernelGroup) -> Emit | None:
    """A pointwise node over ``group``'s reduction sizes (up to size-1 dims) that reads
    what its across reductions store (a weight gradient's cast), as work over the
    columns; else None."""
    if (not group.across or not isinstance(node, PointwiseBuffer)
            or squeezed(node.sizes) != squeezed(group.reduction)):
        return None
    b = group.build()[0]
    parts = across_parts(group_kernel("trial", group, tuple(b.stmts)))
    if parts is None or not {s.buffer for s in parts.columns if isinstance(s, Store)} & set(
            node.reads):
        return None

    def emit(b: BodyBuilder, xs: Sequence[IndexExpr], rs: Sequence[IndexExpr]) -> None:
        it = iter(r for r, size in zip(rs, group.reduction) if size != 1)
        node.emit(b, [Int(0) if size == 1 else next(it) for size in node.sizes])
    return emit


def mixing(node: ReductionBuffer, group: KernelGroup | ExternCall,
           backend: KernelBackend | None) -> KernelGroup | None:
    """``group`` with ``node`` in it, where ``node`` reduces over ``group``'s outer sizes
    and keeps its reduction sizes: over ``group``'s loops (``node`` across them) or over
    ``node``'s (``group``'s members across), whichever the backend takes first; else
    None."""
    if (backend is None or not backend.across_reductions
            or not isinstance(group, KernelGroup) or not group.reduction or group.closed
            or group.template is not None
            or (node.outer_sizes, node.reduction_sizes) != (group.reduction, group.outer)):
        return None
    outer, red, emit = natural(node)
    alone = KernelGroup(outer, red, [(node, emit)])
    alone_kernel = group_kernel("trial", alone, tuple(alone.build()[0].stmts))
    reductions = {m.name for m, _ in group.members if isinstance(m, ReductionBuffer)}
    candidates = [
        KernelGroup(group.outer, group.reduction, [*group.members, (node, swapped(emit))],
                    across=group.across | {node.name}),
        KernelGroup(outer, red, [*((m, swapped(e)) for m, e in group.members), (node, emit)],
                    across=frozenset(reductions - group.across)),
    ]
    return next((c for c in candidates if _taken(c, alone_kernel, backend)), None)


def _taken(candidate: KernelGroup, before: Kernel, backend: KernelBackend) -> bool:
    """Whether every value ``candidate`` reads from a buffer it stores is forwarded (read
    at the index written) and the backend may grow ``before`` into its kernel."""
    b = candidate.build()[0]
    if any(buf in candidate.stored for buf, _ in b.external_loads):
        return False
    return backend.can_fuse(before, group_kernel("trial", candidate, tuple(b.stmts)))


def as_rows(group: KernelGroup | ExternCall, backend: KernelBackend | None
            ) -> KernelGroup | None:
    """A column reduction's group over its rows: every member swapped, its reductions
    summed across the rows (a bias gradient with GELU's gradient inside, stored row by
    row as a pointwise kernel would, its columns summed on the way), where the backend
    takes that kernel; else None. Only for a backend with ``column_groups_as_rows`` (an
    experiment, off: ``tools/gpu/ab_matmul_choice.py ... ember_columns_as_rows``)."""
    if (backend is None or not backend.across_reductions or not backend.column_groups_as_rows
            or not isinstance(group, KernelGroup) or not group.reduction or group.closed
            or group.template is not None):
        return None
    reductions = {m.name for m, _ in group.members if isinstance(m, ReductionBuffer)}
    rows = KernelGroup(group.reduction, group.outer,
                       [(m, swapped(e)) for m, e in group.members],
                       across=frozenset(reductions - group.across))
    before = group_kernel("trial", group, tuple(group.build()[0].stmts))
    return rows if _taken(rows, before, backend) else None


__all__ = ["as_rows", "column_placement", "mixing", "swapped"]
