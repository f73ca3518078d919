"""Graph clean-up passes on functional graphs: dead code and common subexpressions."""

from __future__ import annotations

from ember.runtime.ir import Argument, Graph, Node, ValueRef, resolve_op


def eliminate_dead_code(graph: Graph) -> Graph:
    """Remove ``call``/``constant``/``get_attr`` nodes whose values nobody reads.
    Placeholders always stay (they are the graph's interface). The graph must be
    functional: no op with side effects is kept for its effect."""
    live: set[str] = set()
    for node in reversed(graph.nodes):
        if node.op in ("output", "placeholder") or node.name in live:
            live.add(node.name)
            live.update(r.node for r in node.inputs())
    return Graph([n for n in graph.nodes if n.name in live], dict(graph.symbols))


def _is_random(target: str) -> bool:
    return any(t.name == "nondeterministic_seeded" for t in resolve_op(target).tags)


def _key(node: Node) -> tuple[object, ...]:
    return (node.target, _hashable(node.args), _hashable(tuple(sorted(node.kwargs.items()))))


def _hashable(a: object) -> object:
    # NOTE: the type is part of the key so that 1, 1.0 and True stay apart; floats by
    # repr so that nan equals nan.
    if isinstance(a, tuple):
        return tuple(_hashable(x) for x in a)
    return (type(a).__name__, repr(a) if isinstance(a, float) else a)


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """Merge ``call`` nodes with the same op and arguments (random ops excepted)."""
    seen: dict[tuple[object, ...], str] = {}
    mapping: dict[ValueRef, Argument] = {}
    out: list[Node] = []
    for node in graph.nodes:
        node = Node(node.name, node.op, node.target, node.args, dict(node.kwargs), node.meta,
                    node.source)
        if mapping:
            node.replace_refs(mapping)
        if node.op == "call" and not _is_random(node.target):
            key = _key(node)
            if key in seen:
                _map_results(node, seen[key], mapping)
                continue
            seen[key] = node.name
        out.append(node)
    return Graph(out, dict(graph.symbols))


def _map_results(node: Node, into: str, mapping: dict[ValueRef, Argument]) -> None:
    if isinstance(node.meta, tuple):
        for i in range(len(node.meta)):
            mapping[ValueRef(node.name, i)] = ValueRef(into, i)
    else:
        mapping[ValueRef(node.name)] = ValueRef(into)
