"""Free layouts: tensor inputs whose storage offset and size-1 strides are not
specialised (automatic dynamic layouts, strict capture).

A tensor live at a resume point is often a view whose place in memory moves between
calls: a row of a ``nonzero`` result iterated by a loop (``for e in expert_hit``: row
``i`` starts at offset ``i``, and its size-1 dim has the stride ``len(expert_hit)``), or
the second result of ``torch.where`` on a 2-d mask (it starts where the first ends).
Automatic dynamic makes their sizes symbolic, but a guard on the exact storage offset and
strides made each expert of each call a new cache entry, up to the recompile limit.

Neither value moves an element the graph reads: a size-1 dim is only ever indexed at 0,
and compiled code addresses an input from its own data pointer. So when a cache miss
finds an input that moved in memory (its storage offset, or the stride of a dim of size
1, changed; its sizes may have changed too: :func:`layout_change`), later captures of
that code (``DynamicPolicy.free_layouts``) add it as a *free-layout* input
(:func:`add_free_input`): its fake has a storage of its own, starts it at offset 0, and
its size-1 dims get the strides a contiguous tensor has (below rank 4 only: a 4-d or 5-d
tensor's size-1 strides steer memory-format inference, so they stay exact). Its guard
(``symbolic_tensor``, :func:`free_guard`) checks every other stride but neither the
offset nor those strides. Only a plain tensor (not a parameter, buffer or subclass; a
slice of a parameter is a plain tensor) qualifies. A whole ``detach()``-style view of a
tensor the graph does not have (:func:`_whole_alias`) gets a free layout from its first
capture: its fake would be a view of a base no input stands for, which autograd reads
(``as_strided``) when the graph writes it in place with a value that requires grad.

Where the layout could still reach a value, the function is captured again with exact
layouts, for good (``DynamicPolicy.refuse_layouts``, :class:`FreeLayoutsRefused`): the
code reads a stride, a storage offset or a storage of a tensor over a free input's memory
(``x.stride()``, ``x.storage_offset()``, ``x.as_strided(...)``, :func:`note_read`), the
graph addresses storage itself (``as_strided``, ``set_``: :meth:`FreeInputs.check`), or
it writes in place an input that shares bytes with a free one (the free input's fake has
a storage of its own: the graph would not see the write through it). Read only, two such
inputs are two inputs (``mask[expert_idx]`` beside ``mask``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from ember.frontend._torch import view_base
from ember.frontend.guard_model import Guard, Source
from ember.frontend.size_guards import SymbolicTensor
from ember.runtime.ir import (
    Graph,
    InputSpec,
    Program,
    SourceLocation,
    TensorMeta,
    ValueRef,
    is_view,
    writes_arguments,
)
from ember.runtime.ir.op_queries import operator_schema, written_positions

if TYPE_CHECKING:
    from ember.frontend.dynamic import DynamicDim, DynamicPolicy
    from ember.runtime.tracing import GraphRecorder

__all__ = ["FreeInputs", "FreeLayoutsRefused", "add_free_input", "free_guard", "layout_change",
           "note_read"]

#: below this rank the strides of size-1 dims are free too (memory formats start at 4-d)
_FREE_STRIDES_BELOW = 4

#: Python calls on a tensor that see its layout (their result would be the fake's)
_LAYOUT_READS = frozenset({"stride", "storage_offset", "as_strided", "as_strided_",
                           "as_strided_scatter", "set_", "untyped_storage", "storage",
                           "is_set_to"})

#: graph ops that address storage with absolute offsets and strides
_STORAGE_OPS = ("aten::as_strided", "aten::set_")


class FreeLayoutsRefused(Exception):
    """A capture with free-layout inputs found its layout read (``reason``): the policy
    has turned free layouts off; capture again."""


def layout_change(guard: Guard, actual: Any) -> str | None:
    """For a ``tensor`` or ``symbolic_tensor`` guard that failed on ``actual``: what moved
    (``"storage offset 1 -> 2"``, ``"stride(0) of a size-1 dim 4 -> 3"``) when ``actual``
    has the guard's type, dtype, device, requires_grad and rank and its storage offset or
    the stride of a dim of size 1 (then and now) changed; else None."""
    if guard.kind == "tensor":
        dtype, sizes, strides, device, rg, offset, cls = guard.expected
    elif guard.kind == "symbolic_tensor":
        e: SymbolicTensor = guard.expected
        dtype, sizes, strides, device, rg, offset, cls = (
            e.dtype, e.sizes, e.strides, e.device, e.requires_grad, e.offset, e.cls)
    else:
        return None
    if type(actual) is not torch.Tensor or cls is not torch.Tensor:
        return None
    if (actual.dtype, actual.device, bool(actual.requires_grad), actual.dim()) != (
            dtype, device, bool(rg), len(sizes)):
        return None
    moved = []
    if type(offset) is int and offset != actual.storage_offset():
        moved.append(f"storage offset {offset} -> {actual.storage_offset()}")
    if actual.dim() < _FREE_STRIDES_BELOW:
        moved += [f"stride({d}) of a size-1 dim {st} -> {actual.stride(d)}"
                  for d, (size, st) in enumerate(zip(sizes, strides))
                  if size == 1 and actual.size(d) == 1 and type(st) is int
                  and st != actual.stride(d)]
    return "; ".join(moved) or None


def _normalised_strides(t: torch.Tensor) -> list[int]:
    """``t``'s strides with those of its size-1 dims (below rank 4) as a contiguous
    tensor has them: the next dim's stride times its size (1 for the last dim)."""
    strides = list(t.stride())
    if t.dim() < _FREE_STRIDES_BELOW:
        for d in reversed(range(t.dim())):
            if t.size(d) == 1:
                strides[d] = strides[d + 1] * t.size(d + 1) if d + 1 < t.dim() else 1
    return strides


def _whole_alias(t: torch.Tensor) -> bool:
    """Whether ``t`` is a view of a tensor with its own sizes, strides and offset (a
    ``detach()``: the runtime gives an output that no gradient reaches as one). Its fake
    would be a view of a base the graph does not have, which an in-place write with
    autograd reads (``as_strided``, a graph break): a free-layout fake has none."""
    base = view_base(t)
    return base is not None and (base.shape, base.stride(), base.storage_offset(),
                                 base.dtype) == (t.shape, t.stride(), t.storage_offset(),
                                                 t.dtype)


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` may share bytes (their byte ranges in one storage meet)."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    sa, sb = a.untyped_storage(), b.untyped_storage()
    if sa.data_ptr() != sb.data_ptr() or sa.nbytes() == 0:
        return False

    def span(t: torch.Tensor) -> tuple[int, int]:
        start = int(t.storage_offset()) * t.element_size()
        last = sum((int(n) - 1) * int(st) for n, st in zip(t.shape, t.stride()) if n > 1)
        return start, start + (last + 1) * t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def _written_inputs(graph: Graph) -> set[int]:
    """The positions of the placeholders of ``graph`` that an op writes in place, itself
    or through a view (or the result of an earlier write)."""
    roots = {p.name: i for i, p in enumerate(graph.placeholders)}
    written: set[int] = set()
    for node in graph.calls():
        target = str(node.target)
        if writes_arguments(target):
            schema = operator_schema(target)
            for pos in written_positions(target):
                arg = (node.args[pos] if pos < len(node.args)
                       else node.kwargs.get(schema.arguments[pos].name))
                if isinstance(arg, ValueRef) and arg.node in roots:
                    written.add(roots[arg.node])
                    roots[node.name] = roots[arg.node]  # the result aliases it
        elif is_view(target):
            first = next((a for a in node.args if isinstance(a, ValueRef)), None)
            if first is not None and first.node in roots:
                roots[node.name] = roots[first.node]
    return written


@dataclass
class FreeInputs:
    """The free-layout inputs of one capture (real tensor, its fake), the pairs of inputs
    (real tensors) one of which is free that share bytes, and why the capture must be
    made again with exact layouts (``refused``), if it must."""

    inputs: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    overlaps: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    refused: str | None = None

    def admit(self, policy: DynamicPolicy, source: Source, value: torch.Tensor, user: bool,
              earlier: list[tuple[Source, torch.Tensor]]) -> bool:
        """Whether input ``value`` read from ``source`` gets a free layout (``user``: not
        a parameter or buffer; ``earlier``: the capture's inputs so far, with their
        sources). Inputs that share bytes with a free one are noted (:meth:`check`)."""
        self.overlaps += [(real, value) for real, _ in self.inputs if _overlap(real, value)]
        free = (user and type(value) is torch.Tensor and value.layout == torch.strided
                and value.numel() > 0 and policy.layouts
                and (source in policy.free_layouts or _whole_alias(value)))
        if free:  # (the graph must not write either: check)
            self.overlaps += [(value, other) for _, other in earlier if _overlap(value, other)]
        return free

    def check(self, policy: DynamicPolicy, name: str, program: Program | None = None,
              inputs: list[tuple[Source, torch.Tensor]] | None = None) -> None:
        """Raise :class:`FreeLayoutsRefused` (free layouts turned off in ``policy``) when
        the capture read a free input's layout, or ``program`` has an op that addresses
        storage itself or writes an input that shares bytes with a free one (``inputs``:
        the capture's, in placeholder order)."""
        if not self.inputs:
            return
        if self.refused is None and program is not None:
            for node in program.forward.calls():
                if str(node.target).startswith(_STORAGE_OPS):
                    self.refused = f"the graph calls {node.target}"
                    break
        if self.refused is None and program is not None and self.overlaps and inputs:
            written = _written_inputs(program.forward)
            where = {id(real): i for i, (_, real) in enumerate(inputs)}
            for pair in self.overlaps:
                at = [where.get(id(t)) for t in pair]
                if set(at) & written:
                    shared = " and ".join(inputs[i][0].expr() for i in at if i is not None)
                    self.refused = (f"{shared} share memory, one has a free layout, and the "
                                    "graph writes one of them")
                    break
        if self.refused is not None:
            policy.refuse_layouts(self.refused, name)
            raise FreeLayoutsRefused(self.refused)


def note_read(cap: Any, name: str, fn: Any, args: list[Any]) -> None:
    """Before code reads ``fn`` (a tensor method or torch function named ``name``) on
    ``args``: when it sees a layout (a stride, an offset, a storage) of a tensor over the
    memory of a free-layout input (its fake's storage), the capture refuses free
    layouts."""
    free: FreeInputs = cap.free_layouts
    if not free.inputs or name not in _LAYOUT_READS or free.refused is not None:
        return
    storages = {id(fake.untyped_storage()) for _, fake in free.inputs}
    for t in (getattr(fn, "__self__", None), *args):
        if isinstance(t, torch.Tensor) and id(t.untyped_storage()) in storages:
            free.refused = (f"the code calls {name}() on a tensor over the memory of an "
                            "input whose layout is free")
            return


def add_free_input(recorder: GraphRecorder, value: torch.Tensor, spec: InputSpec,
                   dims: dict[int, DynamicDim] | None) -> torch.Tensor:
    """Add ``value`` as a free-layout input of ``recorder`` (``dims``: its symbolic
    dims): a fake with a storage of its own at offset 0, the sizes ``dims`` asks for,
    and the strides of ``value`` but for its size-1 dims (see the module docstring)."""
    with recorder.paused():
        probe = value.detach().as_strided(value.shape, _normalised_strides(value), 0)
        sizes: Any = probe.shape
        strides: Any = probe.stride()
        if dims and recorder.symbols is not None:
            fake = recorder.symbols.fake_of(probe, spec.name, {
                d: (r.lower, r.upper) for d, r in dims.items()})
            sizes, strides = fake.shape, fake.stride()
        with recorder.fake_mode:
            stand_in = torch.empty_strided(sizes, strides, dtype=value.dtype,
                                           device=value.device)
            if value.requires_grad and not value.is_leaf:
                # NOTE: with autograd history, as the real one (not a leaf, which an
                # in-place op may not write): a copy of a leaf, in its own layout
                leaf = torch.empty_strided(sizes, strides, dtype=value.dtype,
                                           device=value.device).requires_grad_(True)
                with torch.enable_grad():
                    stand_in = stand_in.copy_(leaf)
            else:
                stand_in.requires_grad_(value.requires_grad)
    return recorder.add_input(stand_in, spec)


def free_guard(source: Source, meta: TensorMeta, used: dict[str, Source],
               origin: SourceLocation | None) -> Guard:
    """The guard of a free-layout input read from ``source`` whose placeholder has
    ``meta`` (``used``: the sources of the symbols its sizes and strides read): as
    ``symbolic_tensor``, without the storage offset and the strides of size-1 dims."""
    free = len(meta.sizes) < _FREE_STRIDES_BELOW
    strides = tuple(None if free and size == 1 else st
                    for size, st in zip(meta.sizes, meta.strides))
    return Guard("symbolic_tensor", source, SymbolicTensor(
        meta.dtype, meta.sizes, strides, meta.device, meta.requires_grad, None,
        tuple(used.items()), torch.Tensor), origin)
