"""Buffers a writing extern call owns: what a mutating custom operator or a user Triton
kernel is handed for each argument it writes.

The aot stage calls such a call on *fresh buffers* (:mod:`ember.runtime.ir.fresh_writes`:
``%c = clone(%x); op_(%c)``, later nodes read ``%c`` as the new value); a user kernel
launch (``ember::triton_kernel``) returns new values of what it writes. The lowering
hands the call a buffer only it holds, for each written argument (:func:`own_written`):

* the argument's own buffer (the ``clone`` lowers to its argument's buffer: written in
  place, it is elided) when it is passed whole, in the layout the program traced, no
  value still needed after the call (nor another argument of the call) reads it, and it
  is either a buffer the graph computed, or a **graph input the program mutates**
  (:func:`input_written_in_place`): its ``MUTATED_INPUT`` output then is the input
  itself, the wrapper returns ``argN`` and the runtime's copy back, a copy onto itself,
  is skipped (``ember.runtime.callable``). Not for an input that another input views or
  is viewed by, nor one that requires grad in a program with a backward graph (autograd
  keeps the original);
* otherwise a copy in a new buffer (a Lazy value is computed into one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.inductor.loop_ir.symbolic_index import from_ir, stride_from_ir
from ember.inductor.lowering.layout import is_dense, same_layout
from ember.inductor.lowering.values import Lazy, Stored, contiguous_strides
from ember.runtime.ir import Argument, Node, OutputKind, TensorMeta, ValueRef
from ember.runtime.ir.contracts import InputAliases

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering
    from ember.inductor.lowering.lowered_graph import MutatedInput

__all__ = ["SHAPE_ONLY_ARGUMENTS", "can_write_in_place", "describe_writes",
           "input_kept_reason", "input_written_in_place", "mutated_inputs", "own_written",
           "returns_input_in_place", "src_is_written_input"]

SHAPE_ONLY_ARGUMENTS: dict[str, tuple[int, ...]] = {
    "aten::copy.default": (0,),  # copy(dst, src): dst's sizes and dtype, src's elements
    "aten::empty_like.default": (0,),
    "aten::zeros_like.default": (0,),
    "aten::full_like.default": (0,),
    "aten::new_empty.default": (0,),
    "aten::new_empty_strided.default": (0,),
    "aten::new_zeros.default": (0,),
}
"""Positional arguments whose elements an op does not read (only their sizes, dtype and
device): reading them after a call does not keep the call from writing them."""


def own_written(ctx: GraphLowering, node: Node, ir_arg: Argument, value: Any,
                buffers: list[str], fresh: bool = True) -> Any:
    """The value to pass to call ``node`` for its written argument ``ir_arg`` (lowered:
    ``value``): a buffer only the call holds. Appends the buffer's name to ``buffers``.

    ``fresh``: ``ir_arg`` is a fresh buffer the call fills (a custom operator's), so
    later readers of ``ir_arg`` read what the call leaves, and ``ir_arg`` is the buffer
    from then on; False: ``ir_arg`` keeps its old value (a user kernel's operand, whose
    new value is a result of the call) and must be dead after the call to be written."""
    if isinstance(ir_arg, tuple):
        return tuple(own_written(ctx, node, a, v, buffers, fresh)
                     for a, v in zip(ir_arg, value))
    if not isinstance(ir_arg, ValueRef) or not isinstance(value, (Lazy, Stored)):
        return value  # a graph running every op eagerly: real tensors, already fresh
    meta = ctx.traced_meta(ir_arg)
    if isinstance(value, Stored) and can_write_in_place(ctx, node, ir_arg, value, fresh):
        owned = value
        if ctx.buffers[value.buffer].kind == "input":
            ctx.in_place_inputs.add(value.buffer)
    else:
        strides: tuple[int, ...] | None = None
        if isinstance(meta, TensorMeta):
            traced = tuple(s for s in meta.strides if isinstance(s, int))
            if len(traced) == len(meta.strides) and is_dense(value.sizes, traced):
                strides = traced
        lazy = value if isinstance(value, Lazy) else Lazy(value.element, value.dtype,
                                                          value.sizes)
        owned = ctx.realize(lazy, strides=strides or contiguous_strides(value.sizes),
                            reuse=False)
    buffers.append(owned.buffer)
    if fresh:
        _rebind(ctx, ir_arg, owned)
    return owned


def can_write_in_place(ctx: GraphLowering, node: Node, ref: ValueRef, value: Stored,
                       fresh: bool = True) -> bool:
    """Whether call ``node`` may write ``value`` (``ref``'s, lowered) itself: a buffer the
    graph computed or an input (:func:`input_written_in_place`), passed whole in the
    layout the program traced for ``ref``, that neither another argument of ``node`` nor
    a value still needed after it reads (``fresh``: see :func:`own_written`)."""
    meta = ctx.traced_meta(ref)
    return _writable(ctx, node, ref, value, fresh) and (
        meta is None or same_layout(value.sizes, value.strides,
                                    tuple(stride_from_ir(s) for s in meta.strides)))


def describe_writes(ctx: GraphLowering, buffers: list[str]) -> str:
    """The note's words for the buffers a call writes (``writes buf3``; a graph input:
    ``writes arg0 in place (graph input %x: no copy in or back)``)."""
    parts = []
    for name in buffers:
        if name in ctx.in_place_inputs:
            placeholder = _placeholder(ctx, name)
            parts.append(f"{name} in place (graph input %{placeholder.name}: no copy in "
                         "or back)")
        else:
            parts.append(name)
    return f"writes {', '.join(parts)}"


def input_written_in_place(ctx: GraphLowering, buffer: str) -> bool:
    """Whether a call may write input buffer ``buffer`` (``argN``) itself: the program
    mutates that input (a ``MUTATED_INPUT`` output names it), no other input is a view
    of it or it of one, and it does not require grad in a program with a backward
    graph. The caller checks the rest (passed whole, traced layout, old value dead)."""
    placeholder = _placeholder(ctx, buffer)
    specs = ctx.program.signature.outputs.get(ctx.graph_name) or []
    if not any(s.kind == OutputKind.MUTATED_INPUT and s.target == placeholder.name
               for s in specs):
        return False
    return input_kept_reason(ctx, buffer) is None


def input_kept_reason(ctx: GraphLowering, buffer: str) -> str | None:
    """Why nothing may write mutated input buffer ``buffer`` in place, whatever the
    schedule (another input views it or it views one; it requires grad in a program
    with a backward graph, whose autograd keeps the original), or None."""
    placeholder = _placeholder(ctx, buffer)
    aliases = InputAliases.from_program(ctx.program).by_input
    if placeholder.name in aliases:
        return f"a view of input %{aliases[placeholder.name].base}"
    viewers = sorted(name for name, a in aliases.items() if a.base == placeholder.name)
    if viewers:
        return f"input %{viewers[0]} views it"
    meta = placeholder.meta
    if isinstance(meta, TensorMeta) and meta.requires_grad and "backward" in ctx.program.graphs:
        return "requires grad in a program with a backward graph"
    return None


def mutated_inputs(ctx: GraphLowering) -> tuple[MutatedInput, ...]:
    """The graph's ``MUTATED_INPUT`` outputs whose input has a buffer, each with the
    reason it keeps its copy back whatever the schedule (:func:`input_kept_reason`):
    what the memory plan (``codegen/input_writes.py``) may write in place."""
    # NOTE: imported here: lowered_graph imports buffers, which imports the lowering
    from ember.inductor.lowering.lowered_graph import MutatedInput

    specs = ctx.program.signature.outputs.get(ctx.graph_name) or []
    names = [p.name for p in ctx.graph.placeholders]
    found = []
    for index, spec in enumerate(specs):
        if spec.kind != OutputKind.MUTATED_INPUT or spec.target not in names:
            continue
        buffer = ctx.inputs[names.index(spec.target)]
        if buffer in ctx.buffers:
            found.append(MutatedInput(index, buffer, spec.target,
                                      input_kept_reason(ctx, buffer)))
    return tuple(found)


def returns_input_in_place(ctx: GraphLowering, index: int, buffer: str) -> bool:
    """Whether graph output ``index``, whose value is input buffer ``buffer``, is that
    input's ``MUTATED_INPUT`` output after a call wrote the input in place: the wrapper
    returns the input itself (no copy; the runtime's copy back skips it)."""
    if buffer not in ctx.in_place_inputs:
        return False
    specs = ctx.program.signature.outputs.get(ctx.graph_name) or []
    if not 0 <= index < len(specs):
        return False
    spec = specs[index]
    return (spec.kind == OutputKind.MUTATED_INPUT
            and spec.target == _placeholder(ctx, buffer).name)


def src_is_written_input(ctx: Any, node: Node, src: Any) -> bool:
    """Whether ``aten::copy`` ``node`` copies an input a call wrote in place, whole and
    as traced (``x.copy_(result)`` after a user kernel wrote ``x``): its value is the
    input itself, which the input's ``MUTATED_INPUT`` output then returns."""
    meta = node.meta
    return (isinstance(src, Stored) and src.buffer in getattr(ctx, "in_place_inputs", ())
            and isinstance(meta, TensorMeta) and src.dtype == meta.dtype
            and src.sizes == ctx.buffers[src.buffer].sizes
            and src.strides == ctx.buffers[src.buffer].strides and src.offset == 0
            and tuple(from_ir(s) for s in meta.sizes) == src.sizes)


def _placeholder(ctx: GraphLowering, buffer: str) -> Node:
    return ctx.graph.placeholders[ctx.inputs.index(buffer)]


def _writable(ctx: GraphLowering, node: Node, ref: ValueRef, value: Stored,
              fresh: bool) -> bool:
    """Whether the call may write ``value`` (the value of ``ref``) in place: a buffer
    the graph computed (or an input, :func:`input_written_in_place`), passed whole, that
    neither another argument of ``node`` nor a value still needed after it reads
    (``fresh``: ``ref`` names the written value, so later readers of it do not count)."""
    info = ctx.buffers.get(value.buffer)
    if info is None:
        return False
    if info.kind == "input":
        if not input_written_in_place(ctx, value.buffer):
            return False
    elif info.kind not in ("computed", "extern"):
        return False
    if (value.sizes, value.strides, value.offset) != (info.sizes, info.strides, 0):
        return False
    if value.buffer in ctx.output_buffers:
        return False
    return not any(_touches(ctx, v, value.buffer)
                   for v in _live_values(ctx, node, ref, fresh))


def _live_values(ctx: GraphLowering, node: Node, ref: ValueRef, fresh: bool) -> list[Any]:
    """The lowered values of nodes before ``node`` that ``node`` reads (but ``ref``) or
    that a node after it, or the output, reads (but ``ref`` when ``fresh``)."""
    nodes = ctx.graph.nodes
    at = next(i for i, n in enumerate(nodes) if n is node)
    read: set[str] = set()
    for later in nodes[at + 1:]:
        skip = SHAPE_ONLY_ARGUMENTS.get(later.target, ()) if later.op == "call" else ()
        args = [a for i, a in enumerate(later.args) if i not in skip]
        read.update(r.node for r in _refs((*args, *later.kwargs.values())))
    if fresh:
        read.discard(ref.node)
    read.update(r.node for r in node.inputs() if r.node != ref.node)
    found: list[Any] = []
    for name in read:
        if name not in ctx.values:
            continue
        value = ctx.values[name]
        found.extend(value if isinstance(value, tuple) else (value,))
    return found


def _refs(args: tuple[Any, ...]) -> list[ValueRef]:
    """The value references in ``args`` (nested lists too)."""
    found: list[ValueRef] = []
    for a in args:
        if isinstance(a, ValueRef):
            found.append(a)
        elif isinstance(a, tuple):
            found.extend(_refs(a))
    return found


def _touches(ctx: GraphLowering, value: Any, buffer: str) -> bool:
    """Whether computing or reading ``value`` reads ``buffer``."""
    if isinstance(value, Stored):
        return value.buffer == buffer
    if isinstance(value, Lazy):
        if ctx.is_realized(value) and ctx.realize(value).buffer == buffer:
            return True
        return buffer in ctx.loaded_buffers(value)
    return False


def _rebind(ctx: GraphLowering, ref: ValueRef, owned: Stored) -> None:
    """From now on ``ref`` (the written fresh value) is ``owned``."""
    if ref.index is None:
        ctx.values[ref.node] = owned
        return
    values = list(ctx.values[ref.node])
    values[ref.index] = owned
    ctx.values[ref.node] = tuple(values)
