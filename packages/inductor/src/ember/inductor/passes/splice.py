"""Splicing a replacement graph into a graph in place of a matched value: the
replacement builder of the pattern passes."""

from __future__ import annotations

import re

from ember.runtime.ir import Argument, Graph, Node, SourceLocation, TensorMeta, ValueRef


def splice_graph(graph: Graph, anchor: Node, replacement: Graph, inputs: dict[str, ValueRef],
                 covered: set[str], source: SourceLocation | None) -> ValueRef:
    """Put the calls of ``replacement`` (placeholders named after ``inputs``' keys, one
    output) right before ``anchor``, make every reader of ``anchor`` read the
    replacement's output instead, and drop the ``covered`` nodes (the match) that
    nobody reads any more. The spliced calls get fresh names and ``source``; the output
    keeps ``anchor``'s metadata (its strides too: the wrapper lays a kernel's result
    out so when it comes back otherwise). Returns the new value of ``anchor``.

    Raises:
        ValueError: a placeholder of ``replacement`` is not in ``inputs``, or the
            replacement has not exactly one output.
    """
    mapping: dict[ValueRef, Argument] = {}
    for ph in replacement.placeholders:
        if ph.name not in inputs:
            raise ValueError(f"replacement input {ph.name!r} is not bound")
        mapping[ValueRef(ph.name)] = inputs[ph.name]
    taken = {n.name for n in graph.nodes}
    spliced: list[Node] = []
    for node in replacement.calls():
        name = _fresh(node.name, taken)
        copy = Node(name, "call", node.target, node.args, dict(node.kwargs), node.meta, source)
        copy.replace_refs(mapping)
        mapping[ValueRef(node.name)] = ValueRef(name)
        if isinstance(node.meta, tuple):
            for i in range(len(node.meta)):
                mapping[ValueRef(node.name, i)] = ValueRef(name, i)
        spliced.append(copy)
    outputs = replacement.output_values
    if len(outputs) != 1 or not isinstance(outputs[0], ValueRef):
        raise ValueError(f"a replacement has one output value, not {outputs!r}")
    out = mapping[outputs[0]]
    assert isinstance(out, ValueRef)
    _keep_meta(next(n for n in spliced if n.name == out.node), out.index, anchor.meta)
    at = graph.nodes.index(anchor)
    nodes = graph.nodes[:at] + spliced + graph.nodes[at:]
    readers: dict[ValueRef, Argument] = {ValueRef(anchor.name): out}
    for node in nodes[at + len(spliced):]:
        node.replace_refs(readers)
    graph.nodes = _drop_unread(nodes, covered)
    return out


def _drop_unread(nodes: list[Node], covered: set[str]) -> list[Node]:
    """``nodes`` without the covered ones nobody reads any more (a covered view that
    something else still reads stays, with what it reads)."""
    read: set[str] = set()
    kept: list[Node] = []
    for node in reversed(nodes):
        if node.name in covered and node.name not in read:
            continue
        kept.append(node)
        read.update(r.node for r in node.inputs())
    return kept[::-1]


def _keep_meta(node: Node, index: int | None, meta: object) -> None:
    if not isinstance(meta, TensorMeta):
        return
    if index is None:
        node.meta = meta
    elif isinstance(node.meta, tuple):
        entries = list(node.meta)
        entries[index] = meta
        node.meta = tuple(entries)


def _fresh(name: str, taken: set[str]) -> str:
    """``name``, or its stem numbered like the recorder numbers repeats (``where_2``)."""
    stem = re.sub(r"_\d+$", "", name)
    k = 0
    while name in taken:
        k += 1
        name = f"{stem}_{k}"
    taken.add(name)
    return name
