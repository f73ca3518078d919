"""Graph clean-ups every stage shares: dead-code elimination, common-subexpression
elimination and dropping the tensors nothing names any more.

Which calls a clean-up may touch is decided by :func:`~ember.runtime.ir.op_queries.is_pure`
alone: a call with side effects (asserts, writes to arguments, printing) or a random
call stays even when nobody reads it, and is never merged with another.

A value some call writes in place (a fresh copy a mutating custom operator fills, in a
``core-functional`` program) is never merged with an equal call: the two copies are
different buffers once written. Nor are two values the graph returns (or views of
them): the caller may write one of them (a graph ending at a graph break hands its live
tensors to the next graph, which writes them in place), so they must stay two buffers.

NOTE: a random call whose result nobody reads still stays: it advances the generator,
so removing it would change what every later random call draws (``eager_random``
reproduces eager's streams only if each draw happens).

When two calls are equal (CSE), as a table of argument kinds:

======================  ================================================================
argument                equal to another when
======================  ================================================================
``ValueRef``            it names the same value (after earlier merges are applied)
``float``               same type and same IEEE-754 bit pattern: ``nan`` equals ``nan``
                        of the same payload, ``0.0`` differs from ``-0.0``
``complex``             same type and same bit patterns of both parts
``bool``/``int``/...    same type and ``==``: ``1``, ``1.0`` and ``True`` all differ
``tuple``               same length and equal items
keyword arguments       same names with equal values, in any order
======================  ================================================================
"""

from __future__ import annotations

import struct

from ember.runtime.ir import symbolic
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.graph import Argument, Graph, Node, Program, ScalarMeta, ValueRef
from ember.runtime.ir.op_queries import argument_at, is_pure, is_view, mutated_arguments
from ember.runtime.ir.symbol_rules import _meta_expressions, _plain_symbols, _sym_arguments

__all__ = ["argument_key", "binds_symbol", "drop_unreferenced_tensors", "eliminate_common_subexpressions",
           "eliminate_dead_code", "first_bindings", "is_removable", "output_storages",
           "written_values"]

_STORED = ("constant", "get_attr")


def is_removable(node: Node) -> bool:
    """True if ``node`` may be dropped when nobody reads its value: a ``constant`` or
    ``get_attr`` node, or a call of a pure operator that binds no symbol. Placeholders
    are the graph's interface and the output node its result: they always stay."""
    return node.op in _STORED or (node.op == "call" and is_pure(node.target)
                                  and not binds_symbol(node))


def binds_symbol(node: Node) -> bool:
    """Whether ``node``'s result is an ``int`` that binds an unbacked symbol
    (``int(u0)``, ``.item()``): later sizes read it through the symbol, not its value,
    so it is never dropped nor merged with an equal call (that would unbind it)."""
    metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
    return any(isinstance(m, ScalarMeta) and m.symbol is not None for m in metas)


def first_bindings(graph: Graph) -> dict[str, frozenset[str]]:
    """Node name -> the unbacked symbols its result binds (the binding rule of
    :class:`~ember.runtime.ir.symbolic.SymbolBinder`): those it has as a plain size, or
    names as an ``int`` result, that no placeholder nor earlier node has. A tensor
    result binds too (``nonzero``'s ``[u0, 2]``, a boolean mask's ``index``): dropping
    it, or merging it into an equal earlier call that bound another symbol, would leave
    its symbol unbound where a later size, ``sym(u0)`` argument or guard uses it."""
    bound: set[str] = set()
    for node in graph.placeholders:
        bound.update(_plain_symbols(node.meta))
    found: dict[str, frozenset[str]] = {}
    for node in graph.nodes:
        if node.op == "placeholder":
            continue
        new = _plain_symbols(node.meta) - bound
        if new:
            found[node.name] = frozenset(new)
            bound.update(new)
    return found


def _symbols_used(node: Node) -> set[str]:
    """The symbols ``node``'s metas and ``sym(...)`` arguments use."""
    used: set[str] = set()
    for expr in _meta_expressions(node.meta):
        used.update(symbolic.free_symbols(expr))
    for arg in _sym_arguments(node.args, node.kwargs.values()):
        used.update(symbolic.free_symbols(arg.expr))
    return used


def eliminate_dead_code(graph: Graph) -> Graph:
    """A copy of ``graph`` without the removable nodes (:func:`is_removable`) whose
    values nobody reads, directly or through other removed nodes, and that bind no
    symbol a kept node or a guard uses (:func:`first_bindings`)."""
    binds = first_bindings(graph)
    used: set[str] = set()
    symbols: set[str] = set()
    for guard in graph.guards:
        symbols.update(symbolic.relation_symbols(guard.expr))
    kept: list[Node] = []
    for node in reversed(graph.nodes):
        if (is_removable(node) and node.name not in used
                and not binds.get(node.name, frozenset()) & symbols):
            continue
        kept.append(_copy(node))
        used.update(r.node for r in node.inputs())
        symbols.update(_symbols_used(node))
    return Graph(kept[::-1], dict(graph.symbols), list(graph.guards))


def argument_key(a: Argument) -> object:
    """A hashable key of argument ``a``: two arguments have equal keys exactly when CSE
    treats them as equal (the table in this module's docstring)."""
    if isinstance(a, tuple):
        return (tuple, tuple(argument_key(x) for x in a))
    if isinstance(a, float):
        return (float, struct.pack("<d", a))
    if isinstance(a, complex):
        return (complex, struct.pack("<dd", a.real, a.imag))
    return (type(a), a)


def _call_key(node: Node) -> tuple[object, ...]:
    kwargs = tuple(sorted((k, argument_key(v)) for k, v in node.kwargs.items()))
    return (node.target, argument_key(node.args), kwargs)


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """A copy of ``graph`` in which a pure call equal to an earlier one (same operator,
    equal arguments after earlier merges) is removed and its uses read the earlier
    call's results. Impure and random calls are never merged, nor calls whose result a
    later call writes in place, nor two calls whose results both reach the graph's
    outputs (:func:`output_storages`): the caller gets two tensors and may write one,
    nor a call that binds a symbol (:func:`first_bindings`: two masks' ``index`` calls
    bind ``u0`` and ``u1``, and a guard ``u0 == u1`` reads both)."""
    written = written_values(graph)
    escaping = output_storages(graph)
    binds = first_bindings(graph)
    seen: dict[tuple[object, ...], str] = {}
    mapping: dict[ValueRef, Argument] = {}
    out: list[Node] = []
    for original in graph.nodes:
        node = _copy(original)
        if mapping:
            node.replace_refs(mapping)
        if (node.op == "call" and is_pure(node.target) and not binds_symbol(node)
                and node.name not in written and node.name not in binds):
            key = _call_key(node)
            earlier = seen.get(key)
            if earlier is not None and not (node.name in escaping and earlier in escaping):
                if node.name in escaping:  # the earlier call's buffer is returned now
                    escaping.add(earlier)
                mapping[ValueRef(node.name)] = ValueRef(earlier)
                for i in range(len(node.meta) if isinstance(node.meta, tuple) else 0):
                    mapping[ValueRef(node.name, i)] = ValueRef(earlier, i)
                continue
            seen[key] = node.name
        out.append(node)
    return Graph(out, dict(graph.symbols), list(graph.guards))


def output_storages(graph: Graph) -> set[str]:
    """Names of the call nodes whose storage the graph's outputs hold: the calls the
    output node names, and the bases of those that are views (through chains of views).
    Two zero tensors made by equal ``zeros`` calls and returned (e.g. a state list live
    at a graph break, written by the next graph) must stay two buffers."""
    calls = {n.name: n for n in graph.nodes if n.op == "call"}
    found: set[str] = set()
    pending = [r.node for n in graph.nodes if n.op == "output" for r in n.inputs()]
    while pending:
        name = pending.pop()
        node = calls.get(name)
        if node is None or name in found:
            continue
        found.add(name)
        try:
            view = is_view(node.target)
        except IRFormatError:  # not a registered operator: nothing is known of it
            view = False
        if view:
            pending.extend(r.node for r in node.inputs())
    return found


def written_values(graph: Graph) -> set[str]:
    """Names of the nodes whose value some call of ``graph`` writes in place
    (:func:`~ember.runtime.ir.op_queries.mutated_arguments`)."""
    found: set[str] = set()
    for node in graph.nodes:
        if node.op != "call" or is_pure(node.target):
            continue
        try:
            indices = mutated_arguments(node)
        except IRFormatError:  # not a registered operator: nothing is known of it
            continue
        for index in indices:
            value = argument_at(node, index)
            values = value if isinstance(value, tuple) else (value,)
            found.update(v.node for v in values if isinstance(v, ValueRef))
    return found


def drop_unreferenced_tensors(program: Program) -> Program:
    """A copy of ``program`` without the tensors that no ``constant``/``get_attr`` node
    and no input spec names (e.g. constants folded or eliminated away)."""
    result = program.copy()
    referenced = {n.target for g in result.graphs.values() for n in g.nodes
                  if n.op in _STORED}
    referenced |= {spec.target for specs in result.signature.inputs.values()
                   for spec in specs if spec.target is not None}
    result.tensors = {k: v for k, v in result.tensors.items() if k in referenced}
    return result


def _copy(node: Node) -> Node:
    return Node(node.name, node.op, node.target, node.args, dict(node.kwargs), node.meta,
                node.source)
