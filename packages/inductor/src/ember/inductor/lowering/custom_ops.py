"""Custom operators (``torch.library`` ops of any namespace but ``aten``/``prims``):
extern calls by design, never lowered into kernels and not counted as fallbacks.

A custom operator that writes its arguments (``mutates_args``) arrives writing fresh
buffers (:mod:`ember.runtime.ir.fresh_writes`): ``%c = clone(%x); op_(%c)``, and later
nodes read ``%c`` as the new value. The lowering hands the operator a buffer only it
holds, for each written argument (:mod:`.written_args`): the argument's own buffer
when its old value is dead after the call and it is a buffer the graph computed or a
graph input the program mutates (the ``clone`` is elided; for an input, the copy back
too: the output code's note says ``writes arg0 in place (graph input %x: ...)``),
otherwise a copy in a new buffer.

Every tensor argument reaches the operator in the layout the program traced for it
(``layout.in_traced_layout``): the operator's own code may assume it (a Triton kernel
indexing a contiguous gradient), where the lowering would pass a view.

The call is an :class:`~ember.inductor.buffers.ExternCall` whose ``mutates`` names those
buffers, so the scheduler puts every later reader after it; the written argument's value
is that buffer from then on.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ember.inductor.buffers import ExternCall
from ember.inductor.lowering.context import ExternRequest
from ember.inductor.lowering.layout import in_traced_layout
from ember.inductor.lowering.written_args import describe_writes, own_written
from ember.runtime.ir import Argument, Node, operator_schema
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
            args[index] = own_written(ctx, node, ir_arg, args[index], buffers)
        else:
            name = _argument_name(node, index)
            kwargs[name] = own_written(ctx, node, ir_arg, kwargs[name], buffers)
    metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
    result = ctx._emit_extern(ExternRequest(node, tuple(args), kwargs, metas),
                              fallback=False, reason="")
    call = ctx.nodes[-1]
    assert isinstance(call, ExternCall)
    note = f"{NOTE}, {describe_writes(ctx, buffers)}" if buffers else NOTE
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


__all__ = ["NOTE", "is_custom_operator", "lower_custom_call"]
