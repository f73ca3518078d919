"""A reduction takes in the pointwise kernel that produces what it reads.

ReLU's gradient before a batch norm's per-channel sums, a GELU's before its bias
gradient: the pointwise group writes a buffer that the next reduction reads back in
full. :func:`absorbing` rebuilds the group as the reduction's, its members as inner
work: the values are stored once and reduced in the same pass. The scheduler asks for
it when a reduction fits no group; the backend may refuse (``KernelBackend.can_absorb``:
C++ keeps column reductions apart, measured there). The group's
loop variables become the reduction's, through the same dims or a dense layout's
inverse (:mod:`.loop_ir.inverse`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.inductor.buffers import (
    ExternCall,
    LoopNode,
    PointwiseBuffer,
    ReductionBuffer,
    loop_vars,
)
from ember.inductor.codegen.backend import KernelBackend
from ember.inductor.kernel_group import (
    Emit,
    IndexMap,
    KernelGroup,
    group_kernel,
    natural,
    placed,
)
from ember.inductor.loop_ir import IndexExpr, Load, Stmt, Store, Var, is_affine, substitute
from ember.inductor.loop_ir.inverse import coordinates, dense_strides
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.values import numel

#: the most computations an element of a pointwise node a reduction takes in may cost: a
#: max pool's gathered gradient (38 for a 3x3 window) inside a batch norm's split
#: column reduction made the reduction's programs wait on its argmax loads: torchvision
#: ResNet-18's bf16 training step took 0.24 ms longer on an H100 (tools/gpu/ab_profile.py)
ABSORB_MAX_WORK = 24


def absorbing(node: ReductionBuffer, group: KernelGroup | ExternCall,
              backend: KernelBackend | None) -> KernelGroup | None:
    """``group`` rebuilt as ``node``'s reduction with its members as inner work, or None.

    ``group`` is the last step producing what ``node`` reads. When it is a pointwise group
    over as many elements as ``node``'s full iteration space that writes a buffer
    ``node`` reads (ReLU's gradient before a batch norm's per-channel sums, GELU's
    before a bias gradient), the reduction computes and stores those values itself and
    reduces them in the same pass: the buffer is written once and not read back. The
    group's loop variables become ``node``'s: the same dims, or (a group over a
    channels-last buffer's storage order) the coordinates of the element ``node`` reads
    (:mod:`.loop_ir.inverse`)."""
    if (not isinstance(group, KernelGroup) or group.reduction or group.closed
            or group.template is not None or numel(group.outer) != numel(node.full_sizes)
            or not group.stored & set(node.reads)):
        return None
    pointwise = [m for m, _ in group.members if isinstance(m, PointwiseBuffer)]
    if len(pointwise) != len(group.members) or any(
            m.sizes != group.outer or m.work > ABSORB_MAX_WORK for m in pointwise):
        return None
    outer, red, emit = natural(node)
    alone = KernelGroup(outer, red, [(node, emit)])
    alone_body, group_body = alone.build()[0], group.build()[0]
    divisions = _divided(alone_body.stmts) + _divided(group_body.stmts)
    for index in _absorbed_indexes(node, group, alone_body, group_body):
        members: list[tuple[LoopNode, Emit]] = [(m, placed(m, index)) for m in pointwise]
        candidate = KernelGroup(outer, red, [*members, (node, emit)])
        b = candidate.build()[0]
        if any(buf in candidate.stored for buf, _ in b.external_loads):
            continue  # read at another index than written: no value to forward
        if _divided(b.stmts) > divisions:
            continue  # an index the layouts did not simplify: a // or % an element
        fused = group_kernel("trial", candidate, tuple(b.stmts))
        if backend is not None and not (backend.can_fuse(
                group_kernel("trial", alone, tuple(alone_body.stmts)), fused)
                and backend.can_absorb(fused)):
            return None
        return candidate
    return None


def _divided(stmts: Sequence[Stmt]) -> int:
    """How many loads and stores index through ``//`` or ``%``."""
    return sum(1 for s in stmts if isinstance(s, (Load, Store)) and not is_affine(s.index))


def _absorbed_indexes(node: ReductionBuffer, group: KernelGroup, alone: BodyBuilder,
                      group_body: BodyBuilder) -> list[IndexMap]:
    """How the group's loop variables may follow ``node``'s (xs, rs): its full index
    when the group runs over the same sizes, and the coordinates of the first element
    ``node`` reads from the group (a dense layout's inverse; a ``[2, 16, 128]`` group
    read as ``[32, 128]`` rows: ``x0 = r0 // 16``, ``x1 = r0 % 16``, which its loads of
    contiguous inputs fold back to ``r0``)."""
    found: list[IndexMap] = []
    if group.outer == node.full_sizes:
        found.append(node.full_index)
    read = next(((buf, i) for buf, i in alone.external_loads if buf in group.stored), None)
    if read is None:
        return found
    group_vars = loop_vars(group.outer, "x")
    store = next((s for s in group_body.stmts
                  if isinstance(s, Store) and s.buffer == read[0]), None)
    strides = None if store is None else dense_strides(store.index, group_vars)
    if strides is None:
        return found
    coords = coordinates(read[1], strides, group_vars)
    canonical = [*loop_vars(node.outer_sizes, "x"), *loop_vars(node.reduction_sizes, "r")]

    def mapped(xs: Sequence[IndexExpr], rs: Sequence[IndexExpr]) -> list[IndexExpr]:
        table = {v.name: e for v, e in zip(canonical, (*xs, *rs)) if isinstance(v, Var)}
        return [substitute(c, lambda v: table.get(v.name, v)) for c in coords]
    found.append(mapped)
    return found


__all__ = ["ABSORB_MAX_WORK", "absorbing"]
