"""Functionalizing a custom operator that mutates its arguments.

A ``torch.library`` operator declared with ``mutates_args`` (schema ``Tensor(a!) x``)
has no functional variant torch could name, so the functionalizer calls it on fresh
buffers: a clone of the current value of each written argument, the operator on the
clones, and from then on the clones are those arguments' values. A written graph input
ends as a ``MUTATED_INPUT`` output like any other write (the runtime copies it back)::

    %clone: f32[4] = aten::clone.default(%in0)
    %scale_ = mylib::scale_.default(%clone, 2.0)
    return (..., %clone)  [..., mutated_input in0]

The rule the result follows is :mod:`ember.runtime.ir.fresh_writes` (the verifier checks
it). A written argument that already is such a fresh buffer (a clone nothing has read,
as re-tracing a functional program brings back) is not cloned again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.aot.op_effects import mutation_of, out_arguments
from ember.runtime.ir import Argument, IRFormatError, Node, ValueRef, operator_schema
from ember.runtime.ir.fresh_writes import FRESH_BUFFER_OPS, PURE_NAMESPACES

if TYPE_CHECKING:
    from ember.aot.functionalize import _Functionalizer

def is_custom_operator(target: str) -> bool:
    """Whether ``target`` is outside the ``aten`` and ``prims`` namespaces (a
    ``torch.library`` operator: Python ``custom_op`` or C++ ``TORCH_LIBRARY``)."""
    return target.partition("::")[0] not in PURE_NAMESPACES


def has_functional_variant(target: str) -> bool:
    """Whether the user registered a functional twin of mutating custom operator
    ``target`` that :func:`~ember.aot.op_effects.mutation_of` finds (``ns::op_functional``
    with the same arguments, returning the new values): it is used instead of clones."""
    if out_arguments(target):
        return False  # keyword-only written arguments: the clones handle them
    try:
        mutation_of(target)
    except IRFormatError:
        return False
    return True


def functionalize_custom_call(fz: _Functionalizer, node: Node, args: tuple[Argument, ...],
                              kwargs: dict[str, Argument], written: tuple[int, ...]) -> None:
    """Emit ``node`` (a custom operator writing the schema arguments ``written``) on
    fresh buffers and record the buffers as the new values of what it wrote.
    ``args``/``kwargs``: the call's arguments read in the new graph.

    Raises:
        IRFormatError: a written argument is not a tensor value of the graph.
    """
    schema = operator_schema(node.target)
    new_args = list(args)
    new_kwargs = dict(kwargs)
    writes: list[tuple[ValueRef, ValueRef]] = []  # (source value, its fresh buffer)
    for index in written:
        name = schema.arguments[index].name
        source = node.args[index] if index < len(node.args) else node.kwargs.get(name)
        current = args[index] if index < len(args) else kwargs.get(name)
        fresh = _fresh_buffers(fz, node, name, source, current, writes)
        if index < len(args):
            new_args[index] = fresh
        else:
            new_kwargs[name] = fresh
    new = fz._copy(node, tuple(new_args), new_kwargs)
    for source_ref, buffer in writes:
        fz.write(source_ref, buffer)
    for ref in fz._results(node):
        # NOTE: a custom_op may not return a view of an input, so every result is new
        fz.new_storage(ref, ValueRef(new.node, ref.index))


def _fresh_buffers(fz: _Functionalizer, node: Node, name: str, source: Argument,
                   current: Argument, writes: list[tuple[ValueRef, ValueRef]]) -> Argument:
    if isinstance(source, tuple):
        assert isinstance(current, tuple)
        return tuple(_fresh_buffers(fz, node, name, s, c, writes)
                     for s, c in zip(source, current))
    if source is None:
        return None
    if not isinstance(source, ValueRef) or not isinstance(current, ValueRef):
        raise IRFormatError(f"%{node.name} ({node.target}) writes its argument {name!r}, "
                            f"which is not a tensor value of the graph ({source!r})")
    if _is_unread_fresh_buffer(fz, source, current) and all(s != source for s, _ in writes):
        buffer = current
    else:
        buffer = fz.b.call("aten::clone.default", (current,))
    writes.append((source, buffer))
    return buffer


def _is_unread_fresh_buffer(fz: _Functionalizer, source: ValueRef, current: ValueRef) -> bool:
    """Whether ``current`` (the value of ``source``) is a fresh buffer (a clone or an
    allocation) no node has read yet, which the operator may fill without a copy."""
    alias = fz.alias.get(source)
    if alias is None or alias.chain or current.index is not None:
        return False
    storage = fz.storages[alias.storage]
    if storage.version or storage.root is not None or storage.constant is not None:
        return False
    graph = fz.b.graph
    producer = next((n for n in graph.nodes if n.name == current.node), None)
    if producer is None or producer.op != "call" or producer.target not in FRESH_BUFFER_OPS:
        return False
    return not any(current.node in {r.node for r in n.inputs()} for n in graph.nodes)


__all__ = ["functionalize_custom_call", "has_functional_variant", "is_custom_operator"]
