"""Writes into fresh buffers: how a ``core-functional`` program calls a custom operator
that mutates its arguments.

A custom operator declared with ``mutates_args`` (``Tensor(a!) x`` in its schema) has no
functional twin torch could name. The aot stage calls it on *fresh buffers* instead::

    %clone: f32[4] = aten::clone.default(%x)        # a copy only this call sees
    %op = mylib::scale_.default(%clone, 2.0)        # writes %clone
    %y: f32[4] = aten::sin.default(%clone)          # reads the new value

Read this way the program is still functional: ``%clone`` names one value, the one the
operator leaves in it, because nothing reads it before the write. The rule, checked by
the verifier for ``core-functional`` (:func:`fresh_write_violation`):

* only an operator outside the ``aten`` and ``prims`` namespaces may write an argument;
* each written argument is the result of a call in :data:`FRESH_BUFFER_OPS` (a copy or
  an allocation), read by no node between that call and the write, and written by one
  argument of one call only.

A backend may skip the copy when the value copied is dead after the call (the inductor's
``reinplace`` pass).
"""

from __future__ import annotations

from ember.runtime.ir.graph import Argument, Graph, Node, ValueRef
from ember.runtime.ir.op_queries import argument_at, mutated_arguments

FRESH_BUFFER_OPS: dict[str, str] = {
    "aten::clone.default": "a copy of its argument (the aot stage writes it)",
    "aten::empty.memory_format": "an uninitialized allocation",
    "aten::empty_strided.default": "an uninitialized allocation",
}
"""Operators whose result is a new buffer nothing else holds: a custom operator in a
``core-functional`` program may write into it."""

PURE_NAMESPACES = ("aten", "prims")
"""Namespaces whose writing operators have functional variants (the aot stage uses them)."""


def written_values(node: Node) -> list[ValueRef]:
    """The values call ``node`` writes in place, in schema order (list arguments
    flattened)."""
    found: list[ValueRef] = []
    for index in mutated_arguments(node):
        value: Argument = argument_at(node, index)
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, ValueRef):
                found.append(item)
    return found


def fresh_write_violation(graph: Graph, node: Node) -> str | None:
    """Why call ``node`` of ``graph`` breaks the fresh-buffer rule (module docstring),
    or None if it writes no argument or writes only fresh buffers.

    Raises:
        IRFormatError: if ``node.target`` is not a registered operator.
    """
    written = written_values(node)
    if not written:
        return None
    if node.target.partition("::")[0] in PURE_NAMESPACES:
        return "writes its argument(s) in place; use the op's functional variant"
    producers = {n.name: n for n in graph.nodes}
    seen: set[ValueRef] = set()
    for ref in written:
        if ref in seen:
            return f"writes {ref} through two arguments"
        seen.add(ref)
        producer = producers.get(ref.node)
        if producer is None or producer.op != "call" or producer.target not in FRESH_BUFFER_OPS:
            kind = "a graph input" if producer is not None and producer.op != "call" else (
                f"the result of {producer.target}" if producer is not None else "undefined")
            return (f"writes {ref}, {kind}; a custom operator may write only a fresh "
                    f"buffer (the result of {' or '.join(FRESH_BUFFER_OPS)})")
        reader = first_reader(graph, ref, after=producer, before=node)
        if reader is not None:
            return (f"writes {ref}, which %{reader.name} reads before the write; a fresh "
                    "buffer is read only after the call that fills it")
    return None


def first_reader(graph: Graph, ref: ValueRef, after: Node, before: Node) -> Node | None:
    """The first node strictly between ``after`` and ``before`` that reads ``ref``."""
    inside = False
    for n in graph.nodes:
        if n is before:
            return None
        if inside and ref.node in {r.node for r in n.inputs()}:
            return n
        if n is after:
            inside = True
    return None


__all__ = ["FRESH_BUFFER_OPS", "PURE_NAMESPACES", "first_reader", "fresh_write_violation",
           "written_values"]
