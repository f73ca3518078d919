"""Scheduling and fusion: loop nodes -> kernels (fused groups), in dependency order.

Every loop node has an iteration space ``(outer sizes, reduction sizes)``. A
:class:`KernelGroup` collects nodes that run in one kernel over one such space; the
scheduler walks the nodes in order and puts each one into the first group (not earlier
than the groups it depends on) where it *fits*:

- a reduction fits a group with its own ``(outer, reduction)`` sizes;
- a pointwise node of sizes ``S`` fits a pointwise group over ``S``; a reduction group
  as *inner* work when ``S`` is the full iteration space of one of the group's
  reductions (softmax's ``exp(x - max) / sum``), or as *outer* work when ``S`` equals
  the group's outer sizes up to size-1 dims (``mean = sum / n``, layer norm's ``rstd``),
  or as inner work through a reshape when ``S`` has that full space's number of elements
  and its index stays affine (softmax's division behind a ``view``, as in attention);
- and every value it reads from a buffer the group writes is read at exactly the index
  it is written at, so the builder forwards the value instead of re-reading memory.

That gives producer–consumer fusion (pointwise chains are already inlined by the
lowering; reductions take their pointwise prologues and epilogues), and horizontal
fusion of independent nodes with the same iteration space (up to the backend's
``horizontal_buffer_limit`` buffers a kernel, 8 on the CPU, over at least
``HORIZONTAL_LIMIT_ELEMENTS`` elements). A buffer written by a group
and read by nothing outside it (and not a graph output) is never stored.

Device policy is the kernel backend's (``KernelBackend.can_fuse``): before a node joins
a group, the backend sees the group's kernel and the kernel with the node, and may refuse
(Triton keeps a reduction it runs split splittable: ``codegen/triton/backend.py``).

A reduction that fits no group and takes in no producer (``absorb.py``) may join a
reduction group whose iteration space is its own transposed (``mixed.py``): a norm's
weight gradient, summed down the rows, inside the row kernel of its ``dx``, as an
``across`` reduction; the group is then over the rows, and no node is placed by the
across reduction's index (``KernelGroup.across``). A pointwise node over the columns that
reads the sums joins it too (``mixed.column_placement``).

A matmul (:class:`~ember.inductor.buffers.MatmulBuffer`, a template kernel) starts a
group of its own that no other reduction joins; pointwise nodes join it only as outer
work over its ``(batch,) M, N`` sizes (its epilogue), also through a row-major reshape
(a 3-d linear's ``view`` of a 2-d ``mm``); its operands' producers are already inlined
into its loads (the prologue). The kernel carries the node's ``template``.

A scatter (:class:`~ember.inductor.buffers.ScatterBuffer`) is a *closed* group of its own:
it writes through run-time indexes into a buffer an earlier group initialized, so nothing
fuses into it, it never forwards a value, and every reader of its buffer comes after it.
So does every reader of a buffer an extern call writes in place (``ExternCall.mutates``:
a mutating custom operator). A node using an unbacked symbol (``u0``: in its sizes, an
index, or as a value, ``torch.tensor(n.item())``) joins no group before the extern call
that binds it (``.item()``, ``nonzero``): the wrapper binds ``u0`` after that call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sympy
from ember.inductor import absorb, mixed
from ember.inductor.buffers import (
    ExternCall,
    LoopNode,
    MatmulBuffer,
    PointwiseBuffer,
    ReductionBuffer,
    ScatterBuffer,
    loop_vars,
)
from ember.inductor.codegen.backend import KernelBackend
from ember.inductor.codegen.registry import backend_for
from ember.inductor.kernel_group import (
    Emit,
    KernelGroup,
    group_kernel,
    inner_placement,
    natural,
    squeezed,
)
from ember.inductor.loop_ir import (
    Buffer,
    IndexExpr,
    Int,
    Kernel,
    add,
    floordiv,
    is_affine,
    mod,
    mul,
)
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.lowered_graph import LoweredGraph
from ember.inductor.lowering.values import numel

# How many recent groups a node may join (bounds the trial builds on large graphs).
FUSION_WINDOW = 16
# The backend's horizontal_buffer_limit holds for kernels over at least this many
# elements (a 256 KiB float32 array); smaller independent nodes always fuse.
HORIZONTAL_LIMIT_ELEMENTS = 1 << 16


@dataclass
class KernelStep:
    """Run ``kernel``; ``group`` is what it was built from."""

    kernel: Kernel
    group: KernelGroup


Step = KernelStep | ExternCall


def _placements(node: LoopNode, group: KernelGroup) -> list[Emit]:
    if group.closed or isinstance(node, (ScatterBuffer, MatmulBuffer)):
        return []
    if group.template is not None:
        return _epilogue_placements(node, group)
    if isinstance(node, ReductionBuffer):
        if (node.outer_sizes, node.reduction_sizes) == (group.outer, group.reduction):
            return [lambda b, xs, rs: node.emit(b, xs, rs)]
        return []
    found: list[Emit] = []
    if not group.reduction:
        if node.sizes == group.outer:
            found.append(lambda b, xs, rs: node.emit(b, xs))
        return found
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    for member, _ in group.members:
        if member.name in group.across:
            continue  # its sizes are the group's transposed
        if isinstance(member, ReductionBuffer) and member.full_sizes == node.sizes:
            layout = (member.full_sizes, member.dims)
            if layout in seen:
                continue
            seen.add(layout)
            found.append(inner_placement(node, member))
        elif isinstance(member, ReductionBuffer):
            reshaped = _reshaped_placement(node, member)
            layout = (member.full_sizes, member.dims)
            if reshaped is not None and layout not in seen:
                seen.add(layout)
                found.append(reshaped)
    if squeezed(node.sizes) == squeezed(group.outer):
        def outer(b: BodyBuilder, xs: Sequence[IndexExpr], rs: Sequence[IndexExpr]) -> None:
            it = iter(x for x, s in zip(xs, group.outer) if s != 1)
            node.emit(b, [Int(0) if s == 1 else next(it) for s in node.sizes])
        found.append(outer)
    column = mixed.column_placement(node, group)
    if column is not None:
        found.append(column)
    return found


#: the most computations an element of a matmul template's epilogue node may take. A
#: longer one runs over the template's whole register tile (128x256 accumulators) and
#: slows the matmul more than a separate pass costs: on the H200 HF GPT-2's tanh GELU
#: (25 computations: bf16 rounding after each op) fused into its MLP matmuls took the
#: model from 5.45 to 6.23 ms (``tools/gpu/ab_matmul_choice.py``); an exact GELU (11)
#: fuses and gains (the matmul suite's GEMM + bias + GELU)
EPILOGUE_MAX_WORK = 16


def _epilogue_placements(node: LoopNode, group: KernelGroup) -> list[Emit]:
    """Where a node may join a matmul's group: a pointwise node over the group's outer
    sizes (up to size-1 dims), or over a row-major reshape of them whose index the
    template can compute (``[B*S, N]`` viewed as ``[B, S, N]``)."""
    if not isinstance(node, PointwiseBuffer) or node.work > EPILOGUE_MAX_WORK:
        return []
    if squeezed(node.sizes) == squeezed(group.outer):
        def outer(b: BodyBuilder, xs: Sequence[IndexExpr], rs: Sequence[IndexExpr]) -> None:
            it = iter(x for x, s in zip(xs, group.outer) if s != 1)
            node.emit(b, [Int(0) if s == 1 else next(it) for s in node.sizes])
        return [outer]
    if numel(node.sizes) != numel(group.outer) or not node.sizes:
        return []

    def reshaped(b: BodyBuilder, xs: Sequence[IndexExpr], rs: Sequence[IndexExpr]) -> None:
        strides = [numel(group.outer[d + 1:]) for d in range(len(xs))]
        linear = add(*(mul(i, st) for i, st in zip(xs, strides)))
        index: list[IndexExpr] = [
            Int(0) if size == 1 else mod(floordiv(linear, numel(node.sizes[d + 1:])), size)
            for d, size in enumerate(node.sizes)]
        # the group's row-major results, read through the reshaping view, are forwarded
        same = add(*(mul(i, numel(node.sizes[d + 1:])) for d, i in enumerate(index)))
        for buf in group.stored:
            b.alias_stored(buf, linear, same)
        node.emit(b, index)
    return [reshaped]


def _reshaped_placement(node: PointwiseBuffer, reduction: ReductionBuffer) -> Emit | None:
    """Inner work over a reshape of the reduction's full space (same elements, row-major),
    when the reshaped index is affine in the loop variables; else None."""
    if numel(node.sizes) != numel(reduction.full_sizes):
        return None

    def index(full: Sequence[IndexExpr]) -> list[IndexExpr]:
        strides = [numel(reduction.full_sizes[d + 1:]) for d in range(len(full))]
        linear = add(*(mul(i, st) for i, st in zip(full, strides)))
        return [mod(floordiv(linear, numel(node.sizes[d + 1:])), size)
                for d, size in enumerate(node.sizes)]

    probe = index(reduction.full_index(loop_vars(reduction.outer_sizes, "x"),
                                       loop_vars(reduction.reduction_sizes, "r")))
    if not all(is_affine(i) for i in probe):
        return None

    def emit(b: BodyBuilder, xs: Sequence[IndexExpr], rs: Sequence[IndexExpr]) -> None:
        node.emit(b, index(reduction.full_index(xs, rs)))
    return emit


def _default_backend(lowered: LoweredGraph) -> KernelBackend | None:
    try:
        return backend_for(lowered.device.type)
    except RuntimeError:  # no backend: nothing is generated for it, no policy applies
        return None


def schedule(lowered: LoweredGraph, backend: KernelBackend | None = None) -> list[Step]:
    """Fuse ``lowered.nodes`` into kernels; returns the steps in execution order.

    ``backend`` (default: the one serving ``lowered.device``) may refuse a fusion
    (:meth:`~ember.inductor.codegen.backend.KernelBackend.can_fuse`).
    """
    if backend is None:
        backend = _default_backend(lowered)
    nodes = _eliminate_dead(lowered)
    scalars = {name for name, info in lowered.buffers.items()
               if all(size == 1 for size in info.sizes)}
    steps: list[KernelGroup | ExternCall] = []
    producer: dict[str, int] = {}
    binder: dict[str, int] = {}  # an unbacked symbol -> the extern call that binds it
    for node in nodes:
        if isinstance(node, ExternCall):
            at = _extern_position(steps, node)
            steps.insert(at, node)
            for table in (producer, binder):
                for name, i in table.items():
                    if i >= at:
                        table[name] = i + 1
            for out in (*node.outputs, *node.mutates):
                if out is not None:
                    producer[out] = at  # NOTE: a written buffer's readers run after it
            for sym in _bound_symbols(node):
                binder.setdefault(sym, at)
            continue
        if isinstance(node, ScatterBuffer):
            outer, red, emit = natural(node)
            steps.append(KernelGroup(outer, red, [(node, emit)], closed=True))
            producer[node.name] = len(steps) - 1
            continue
        if isinstance(node, MatmulBuffer):
            outer, red, emit = natural(node)
            steps.append(KernelGroup(outer, red, [(node, emit)], template=node.template))
            producer[node.name] = len(steps) - 1
            continue
        earliest = max((producer[r] for r in node.reads if r in producer), default=0)
        if binder:  # a node using u0 (its sizes, an index, its value) runs after u0's call
            earliest = max([earliest, *(binder[s] for s in _symbols_used(node)
                                        if s in binder)])
        placed = False
        for gi in range(max(earliest, len(steps) - FUSION_WINDOW, 0), len(steps)):
            group = steps[gi]
            if not isinstance(group, KernelGroup) or _over_horizontal_limit(
                    node, group, backend, scalars):
                continue
            for emit in _placements(node, group):
                b, loads, stmts = group.build(emit)
                if any(buf in group.stored for buf, _ in b.external_loads[loads:]):
                    continue
                if backend is not None and not backend.can_fuse(
                        group_kernel("trial", group, tuple(b.stmts[:stmts])),
                        group_kernel("trial", group, tuple(b.stmts))):
                    continue
                group.members.append((node, emit))
                producer[node.name] = gi
                placed = True
                break
            if placed:
                break
        if not placed and isinstance(node, ReductionBuffer) and earliest < len(steps):
            absorbed = absorb.absorbing(node, steps[earliest], backend)
            if absorbed is not None:
                steps[earliest] = absorbed
                producer[node.name] = earliest
                placed = True
        if not placed and isinstance(node, ReductionBuffer):
            for gi in range(len(steps) - 1, max(earliest, len(steps) - FUSION_WINDOW) - 1, -1):
                mixed_group = mixed.mixing(node, steps[gi], backend)
                if mixed_group is not None:
                    steps[gi] = mixed_group
                    producer[node.name] = gi
                    placed = True
                    break
        if not placed:
            outer, red, emit = natural(node)
            steps.append(KernelGroup(outer, red, [(node, emit)]))
            producer[node.name] = len(steps) - 1
    if backend is not None and backend.column_groups_as_rows:  # an experiment (mixed.py)
        steps = [mixed.as_rows(s, backend) or s for s in steps]
    return _finish(lowered, steps)


def _bound_symbols(call: ExternCall) -> list[str]:
    """The unbacked symbols an extern call's results bind: int results (``.item()``) and
    plain sizes of tensor results (``nonzero``'s ``[u0, 2]``; the wrapper binds a symbol
    at its first such call)."""
    found = [sym for _, sym in call.binds]
    for meta in call.result_meta:
        if meta is not None:
            found += [s.name for s in meta[1] if isinstance(s, sympy.Symbol)]
    return found


def _symbols_used(node: LoopNode) -> set[str]:
    """The size symbols ``node``'s kernel would take: in its sizes, its indexes, and as
    values (``index u0``: ``torch.tensor(n.item())``)."""
    outer, red, emit = natural(node)
    group = KernelGroup(outer, red, [(node, emit)])
    return set(group_kernel("symbols", group, tuple(group.build()[0].stmts)).size_args)


def _over_horizontal_limit(node: LoopNode, group: KernelGroup,
                           backend: KernelBackend | None, scalars: set[str]) -> bool:
    """Whether ``node``, sharing no buffer with ``group`` (single-element buffers, such as
    an optimizer's step counts and constants, aside), would take the kernel, over at
    least ``HORIZONTAL_LIMIT_ELEMENTS`` elements, past the backend's
    ``horizontal_buffer_limit`` buffers."""
    limit = None if backend is None else backend.horizontal_buffer_limit
    elements = numel((*group.outer, *group.reduction))
    if limit is None or (isinstance(elements, int) and elements < HORIZONTAL_LIMIT_ELEMENTS):
        return False  # small arrays stay in cache: fewer launches win
    touched = group.touched - scalars
    mine = {node.name, *node.reads} - scalars
    return not (mine & touched) and len(touched) + len(mine) > limit


def _extern_position(steps: list[KernelGroup | ExternCall], call: ExternCall) -> int:
    """Where an extern call goes among the steps: last, except that a call reading
    nothing (the random seed's draw) goes before the matmul templates that follow the last
    extern call, so that their epilogues can take the random ops it feeds (dropout).
    Extern calls keep their order (they may draw from torch's generator). The matmul
    groups after the last extern call are marked ``placed_extern``."""
    if call.reads:
        return len(steps)
    last = max((i for i, s in enumerate(steps) if isinstance(s, ExternCall)), default=-1)
    at = len(steps)
    for i in range(last + 1, len(steps)):
        step = steps[i]
        if isinstance(step, KernelGroup) and step.template is not None:
            step.placed_extern = True
            at = min(at, i)
    return at


def _eliminate_dead(lowered: LoweredGraph) -> list[LoopNode | ExternCall]:
    """Drop loop nodes whose buffer nobody reads (left by rules that fell back)."""
    live = set(lowered.output_buffers)
    kept: list[LoopNode | ExternCall] = []
    for node in reversed(lowered.nodes):
        if isinstance(node, ExternCall):
            live.update(node.reads)
            kept.append(node)
        elif node.name in live:
            # NOTE: a scatter keeps its buffer live, so the node initializing it stays
            live.update(node.reads)
            kept.append(node)
    return list(reversed(kept))


def _finish(lowered: LoweredGraph, steps: list[KernelGroup | ExternCall]) -> list[Step]:
    # which buffers are read outside the group that writes them
    needed = set(lowered.output_buffers)
    built: dict[int, BodyBuilder] = {}
    for i, s in enumerate(steps):
        if isinstance(s, ExternCall):
            needed.update(s.reads)
            continue
        if s.closed:
            needed.update(s.stored)  # the scatter writes into what an earlier group stored
        built[i] = b = s.build()[0]
        needed.update(buf for buf, _ in b.external_loads)
    result: list[Step] = []
    count = 0
    for i, s in enumerate(steps):
        if isinstance(s, ExternCall):
            result.append(s)
            continue
        b = built[i]
        dropped = s.stored - needed
        body = b.finish(drop_stores_to=dropped)
        names: list[str] = []
        for st in body:
            buf = getattr(st, "buffer", None)
            if buf is not None and buf not in names:
                names.append(buf)
        if not any(getattr(st, "buffer", None) in s.stored for st in body):
            continue  # every result was dropped
        buffers = tuple(
            Buffer(n, lowered.buffers[n].dtype, lowered.buffers[n].sizes,
                   lowered.buffers[n].strides, lowered.buffers[n].host) for n in names)
        origins = tuple(o for node, _ in s.members for o in node.origins)
        kernel = group_kernel(f"kernel{count}", s, body, buffers,
                               tuple(dict.fromkeys(origins)))
        count += 1
        result.append(KernelStep(kernel, s))
    return result


def written_buffers(step: Step) -> list[str]:
    """The wrapper variables a step creates."""
    if isinstance(step, ExternCall):
        return [o for o in step.outputs if o is not None]
    return step.kernel.stored_buffers()


def read_buffers(step: Step) -> list[str]:
    """The wrapper variables a step reads."""
    if isinstance(step, ExternCall):
        return list(step.reads)
    return step.kernel.loaded_buffers()


def _describe(node: LoopNode) -> str:
    if isinstance(node, ReductionBuffer):
        return f"{node.name} ({node.op})"
    if isinstance(node, MatmulBuffer):
        return f"{node.name} ({node.template.op} template)"
    if isinstance(node, ScatterBuffer):
        return f"{node.name} (scatter{' add' if node.accumulate else ''})"
    return f"{node.name} (pointwise)"


def format_schedule(steps: Sequence[Step]) -> str:
    """The schedule as text, one line a step, for logs and golden tests: a kernel's loop
    sizes (outer, then ``reduce`` and the reduction sizes), the loop nodes fused into it
    in order (a reduction with its op), the buffers it loads and stores; an extern call's
    target, the buffers it reads and its outputs::

        kernel0 [4] reduce [8]: buf0 (amax), buf1 (sum), buf2 (pointwise); loads in0; stores buf2
        extern aten::mm.default(buf2, in1) -> buf3

    A matmul template's kernel names its template after its sizes::

        kernel0 [40, 36] reduce [24] addmm template bm64_bn64_bk32_g8_s5_w4: buf0 (addmm template), buf1 (pointwise); loads in0, in1, in2; stores buf1
    """
    lines: list[str] = []
    for step in steps:
        if isinstance(step, ExternCall):
            outputs = ", ".join(o for o in step.outputs if o is not None) or "-"
            writes = f"; writes {', '.join(step.mutates)}" if step.mutates else ""
            lines.append(f"extern {step.target}({', '.join(step.reads)}) -> {outputs}{writes}")
            continue
        group = step.group
        space = f"{list(group.outer)}"
        if group.reduction:
            space += f" reduce {list(group.reduction)}"
        if group.template is not None:
            space += f" {group.template.describe()}"
        members = ", ".join(_describe(node) for node, _ in group.members)
        loads = ", ".join(step.kernel.loaded_buffers()) or "-"
        stores = ", ".join(step.kernel.stored_buffers()) or "-"
        lines.append(f"{step.kernel.name} {space}: {members}; loads {loads}; stores {stores}")
    return "\n".join(lines)


__all__ = ["KernelGroup", "KernelStep", "Step", "format_schedule", "read_buffers", "schedule",
           "written_buffers"]
