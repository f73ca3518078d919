"""Custom operators (``torch.library`` ops of any namespace but ``aten``/``prims``):
extern calls by design, never lowered into kernels and not counted as fallbacks.

A custom operator that writes its arguments (``mutates_args``) arrives writing fresh
buffers (:mod:`ember.runtime.ir.fresh_writes`): ``%c = clone(%x); op_(%c)``, and later
nodes read ``%c`` as the new value. The lowering hands the operator a buffer only it
holds, for each written argument:

* the argument's own buffer when it is a buffer the graph computed (not an input or a
  constant), passed whole in the traced layout, and no value still needed after the call
  reads it (the ``clone`` lowers to its argument's buffer: written in place, it is
  elided);
* otherwise a copy in a new buffer (a Lazy value is computed into one).

Every tensor argument reaches the operator in the layout the program traced for it
(``layout.in_traced_layout``): the operator's own code may assume it (a Triton kernel
indexing a contiguous gradient), where the lowering would pass a view.

The call is an :class:`~ember.inductor.buffers.ExternCall` whose ``mutates`` names those
buffers, so the scheduler puts every later reader after it; the written argument's value
is that buffer from then on. The ``reinplace`` graph pass (``passes/reinplace.py``)
removes the ``clone`` when the value copied is dead after the call, so that the check
above finds its buffer free.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ember.inductor.buffers import ExternCall
from ember.inductor.lowering.context import ExternRequest
from ember.inductor.loop_ir.symbolic_index import from_ir
from ember.inductor.lowering.layout import in_traced_layout, is_dense, same_layout
from ember.inductor.lowering.values import Lazy, Stored, contiguous_strides
from ember.runtime.ir import Argument, Node, TensorMeta, ValueRef, operator_schema
from ember.runtime.ir.fresh_writes import PURE_NAMESPACES
from ember.runtime.ir.op_queries import argument_at, mutated_arguments

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering

NOTE = "custom operator"
"""The note an extern call of a custom operator carries (output code, printed graph)."""


def is_custom_operator(target: str) -> bool:
    """Whether ``target`` is a ``torch.library`` operator outside ``aten``/``prims``."""
    return target.partition("::")[0] not in PURE_NAMESPACES


def lower_custom_call(ctx: GraphLowering, node: Node) -> Any:
    """``node`` (a custom operator call) as an extern call; returns its result value(s).
    Written arguments get buffers only the call holds (module docstring)."""
    written = mutated_arguments(node)
    positional = {i for i in written if i < len(node.args)}
    keyword = {_argument_name(node, i) for i in written if i >= len(node.args)}
    args = [ctx._arg(a) if i in positional else _traced(ctx, a)
            for i, a in enumerate(node.args)]
    kwargs = {k: ctx._arg(v) if k in keyword else _traced(ctx, v)
              for k, v in node.kwargs.items()}
    buffers: list[str] = []
    for index in written:
        ir_arg = argument_at(node, index)
        if index < len(node.args):
            args[index] = _own(ctx, node, ir_arg, args[index], buffers)
        else:
            name = _argument_name(node, index)
            kwargs[name] = _own(ctx, node, ir_arg, kwargs[name], buffers)
    metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
    result = ctx._emit_extern(ExternRequest(node, tuple(args), kwargs, metas),
                              fallback=False, reason="")
    call = ctx.nodes[-1]
    assert isinstance(call, ExternCall)
    note = f"{NOTE}, writes {', '.join(buffers)}" if buffers else NOTE
    ctx.nodes[-1] = replace(call, note=note, mutates=tuple(buffers))
    return result


def _traced(ctx: GraphLowering, arg: Argument) -> Any:
    """Argument ``arg`` lowered, each tensor in the layout the program traced for it:
    the operator's code met that layout when it was traced (its fake kernel) and in
    eager (a ``clone`` of an ``expand`` is dense there, not a stride-0 view)."""
    if isinstance(arg, tuple):
        return tuple(_traced(ctx, a) for a in arg)
    return in_traced_layout(ctx, arg, ctx._arg(arg))


def _argument_name(node: Node, index: int) -> str:
    return str(operator_schema(node.target).arguments[index].name)


def _own(ctx: GraphLowering, node: Node, ir_arg: Argument, value: Any,
         buffers: list[str]) -> Any:
    """The value to pass for written argument ``ir_arg`` (lowered: ``value``): a buffer
    only this call holds, which becomes ``ir_arg``'s value."""
    if isinstance(ir_arg, tuple):
        return tuple(_own(ctx, node, a, v, buffers) for a, v in zip(ir_arg, value))
    if not isinstance(ir_arg, ValueRef) or not isinstance(value, (Lazy, Stored)):
        return value  # a graph running every op eagerly: real tensors, already fresh
    meta = ctx.traced_meta(ir_arg)
    if (isinstance(value, Stored) and _writable(ctx, node, ir_arg, value)
            and (meta is None or same_layout(value.sizes, value.strides,
                                             tuple(from_ir(s) for s in meta.strides)))):
        owned = value
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
    _rebind(ctx, ir_arg, owned)
    return owned


def _writable(ctx: GraphLowering, node: Node, ref: ValueRef, value: Stored) -> bool:
    """Whether the call may write ``value``'s buffer in place: a buffer the graph
    computed, passed whole, that no value still needed after ``node`` reads."""
    info = ctx.buffers.get(value.buffer)
    if info is None or info.kind not in ("computed", "extern"):
        return False
    if (value.sizes, value.strides, value.offset) != (info.sizes, info.strides, 0):
        return False
    if value.buffer in ctx.output_buffers:
        return False
    return not any(_touches(ctx, v, value.buffer) for v in _live_values(ctx, node, ref))


def _live_values(ctx: GraphLowering, node: Node, ref: ValueRef) -> list[Any]:
    """The lowered values of nodes before ``node`` (other than ``ref``'s) that a node
    after it, or the output, still reads."""
    nodes = ctx.graph.nodes
    at = next(i for i, n in enumerate(nodes) if n is node)
    read_later: set[str] = set()
    for later in nodes[at + 1:]:
        read_later.update(r.node for r in later.inputs())
    found: list[Any] = []
    for name in read_later:
        if name == ref.node or name not in ctx.values:
            continue
        value = ctx.values[name]
        found.extend(value if isinstance(value, tuple) else (value,))
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


__all__ = ["NOTE", "is_custom_operator", "lower_custom_call"]
