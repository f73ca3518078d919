"""A kernel group: the loop nodes the scheduler fuses into one kernel, and how each
node's work is placed in the group's loops (an ``Emit``). Shared by the scheduler
(``scheduler.py``) and its rule that a reduction takes in its producer (``absorb.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ember.inductor.buffers import (
    LoopNode,
    MatmulBuffer,
    PointwiseBuffer,
    ReductionBuffer,
    loop_vars,
)
from ember.inductor.loop_ir import Buffer, IndexExpr, Kernel, MatmulTemplate, Stmt, Var
from ember.inductor.lowering.builder import BodyBuilder

Emit = Callable[[BodyBuilder, Sequence[IndexExpr], Sequence[IndexExpr]], None]


@dataclass
class KernelGroup:
    """Loop nodes that become one kernel over ``outer`` x ``reduction``."""

    outer: tuple[int, ...]
    reduction: tuple[int, ...]
    members: list[tuple[LoopNode, Emit]] = field(default_factory=list)
    closed: bool = False  # a scatter: no other node joins it
    template: MatmulTemplate | None = None  # a matmul's group: its epilogue joins it
    #: a matmul's group after the last extern call when a call reading nothing was
    #: placed (``_extern_position``): as an extern call, it would have moved that call
    placed_extern: bool = False
    #: the reductions among ``members`` that run across the group's outer ranges
    #: (``mixed.py``): their sizes are the group's transposed, so no node is placed by
    #: their index
    across: frozenset[str] = frozenset()

    @property
    def stored(self) -> set[str]:
        return {n.name for n, _ in self.members}

    @property
    def touched(self) -> set[str]:
        """The buffers the members read or write."""
        return {b for n, _ in self.members for b in (n.name, *n.reads)}

    def build(self, extra: Emit | None = None) -> tuple[BodyBuilder, int, int]:
        """A builder with every member emitted (then ``extra``); also returns how many
        external loads and how many statements came from the members (the rest are
        ``extra``'s: the builder only appends, so its first statements are the members'
        body)."""
        b = BodyBuilder()
        xs, rs = loop_vars(self.outer, "x"), loop_vars(self.reduction, "r")
        for _, emit in self.members:
            emit(b, xs, rs)
        loads, stmts = len(b.external_loads), len(b.stmts)
        if extra is not None:
            extra(b, xs, rs)
        return b, loads, stmts


def squeezed(sizes: Sequence[int]) -> tuple[int, ...]:
    """``sizes`` without its 1s (sizes that match up to size-1 dims compare equal)."""
    return tuple(s for s in sizes if s != 1)


def natural(node: LoopNode) -> tuple[tuple[int, ...], tuple[int, ...], Emit]:
    if isinstance(node, (ReductionBuffer, MatmulBuffer)):
        return node.outer_sizes, node.reduction_sizes, lambda b, xs, rs: node.emit(b, xs, rs)
    return node.sizes, (), lambda b, xs, rs: node.emit(b, xs)


#: a pointwise node's index in a group's loops, from the group's (xs, rs)
IndexMap = Callable[[Sequence[IndexExpr], Sequence[IndexExpr]], list[IndexExpr]]


def placed(node: PointwiseBuffer, index: IndexMap) -> Emit:
    """``node``'s work in a group's loops, at ``index(xs, rs)``."""
    def emit(b: BodyBuilder, xs: Sequence[IndexExpr], rs: Sequence[IndexExpr]) -> None:
        node.emit(b, index(xs, rs))
    return emit


def inner_placement(node: PointwiseBuffer, reduction: ReductionBuffer) -> Emit:
    """``node`` as inner work of ``reduction``'s group, over its full index."""
    return placed(node, reduction.full_index)


def group_kernel(name: str, group: KernelGroup, body: tuple[Stmt, ...],
                 buffers: tuple[Buffer, ...] = (), origins: tuple[str, ...] = ()) -> Kernel:
    """The kernel of ``group`` with ``body``: its loop variables are the group's."""
    return Kernel(name,
                  ranges=tuple(v for v in loop_vars(group.outer, "x") if isinstance(v, Var)),
                  reduction_ranges=tuple(
                      v for v in loop_vars(group.reduction, "r") if isinstance(v, Var)),
                  body=body, buffers=buffers, origins=origins, template=group.template)


__all__ = ["Emit", "IndexMap", "KernelGroup", "group_kernel", "inner_placement", "natural",
           "placed", "squeezed"]
