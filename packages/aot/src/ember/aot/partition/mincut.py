"""Min-cut partitioning of a joint forward/backward graph.

The joint graph's placeholders are the forward inputs ("primals") followed by one
tangent per differentiable output; its outputs are the forward outputs followed by the
gradients. Every value either runs in the forward graph, or is recomputed in the backward
graph, or both; a value the backward graph reads but does not recompute is *saved*.

The choice is a minimum cut (after the recompute-vs-save formulation of the
functorch partitioner, written here from scratch): each value ``v`` becomes two vertices
``v.in -> v.out`` joined by an edge as wide as the bytes it would take to save ``v``;
data dependencies are infinite edges; the source feeds the forward inputs and every value
that must never be recomputed (custom operators, matmuls, convolutions,
random ops, reductions over large inputs, and every op that is not pointwise, a view or
in :data:`~ember.aot.partition.recompute_rules.RECOMPUTABLE`); every value that depends on a tangent drains
into the sink. (Values the forward graph computes for its own outputs are not tied to the
source: the backward graph may recompute them instead of saving them.) The cut edges are the values to save, and a value on the sink side of the
cut is recomputed in the backward graph.

With symbolic sizes a value's bytes are an expression over the graph's symbols: the
edge capacities are its values at the symbols' hints, the reported ``saved_bytes`` is
the expression, and the backward graph binds its symbols from its own placeholders
(:mod:`ember.aot.partition.shape_symbols`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ember.aot.config import AotConfig
from ember.aot.partition.extern_reads import SAVED_FOR_EXTERN, read_by_both
from ember.aot.partition.maxflow import INFINITE, FlowNetwork
from ember.aot.partition.recompute_rules import is_reduction, recompute_kind
from ember.aot.partition.report import SAVED_INPUT, format_partition
from ember.aot.partition.shape_symbols import bind_backward_symbols
from ember.aot.symbolic_sizes import hint, nbytes, node_symbols, numel, total
from ember.runtime.ir import (
    Argument,
    Graph,
    Node,
    ScalarMeta,
    SymbolRange,
    SymInt,
    TensorMeta,
    ValueRef,
    is_random,
)
from ember.runtime.ir.fresh_writes import written_values
from ember.runtime.ir.op_queries import has_side_effects
from ember.runtime.logs import TOPICS, log

# Ops whose results are never recomputed in the backward graph: they cost much more to
# recompute than to save.
COMPUTE_BOUND_OPS = frozenset({
    "aten::mm.default", "aten::addmm.default", "aten::bmm.default", "aten::baddbmm.default",
    "aten::convolution.default", "aten::_scaled_dot_product_flash_attention.default",
    "aten::_scaled_dot_product_efficient_attention.default",
    "aten::_scaled_dot_product_cudnn_attention.default",
    "aten::_scaled_dot_product_flash_attention_for_cpu.default",
})


#: bytes recomputing a pointwise op the forward computes anyway costs in the cut beyond
#: its saved bytes: of two cuts that save as many bytes, the one recomputing fewer of the
#: forward's ops. A GPT's residual stream ``x + proj(...)``: saving the sum or the matmul
#: output it adds is a tie; saving the sum spares the backward recomputing it (and
#: reading both addends in each reader). Work only the backward needs is not moved into
#: the forward by it.
RECOMPUTE_TIE_BREAK = 1


@dataclass
class Partition:
    """The two graphs and the interface between them.

    ``saved``: the values the forward graph returns for the backward graph, in order
    (each becomes a ``saved_*`` placeholder of ``backward``).
    """

    forward: Graph
    backward: Graph
    saved: list[ValueRef]
    saved_bytes: SymInt
    recomputed: list[str]


def value_bytes(meta: object) -> SymInt:
    """The bytes a value takes (sum over the results of a node with several): an int,
    or an expression over the graph's symbols when a size is symbolic."""
    if isinstance(meta, TensorMeta):
        return nbytes(meta)
    if isinstance(meta, ScalarMeta):
        return 8
    if isinstance(meta, tuple):
        return total(value_bytes(m) for m in meta)
    return 0


def is_recomputable(node: Node, graph_meta: Mapping[str, object], config: AotConfig,
                    symbols: Mapping[str, SymbolRange] | None = None) -> bool:
    """False for a node whose value must be saved rather than recomputed. Symbolic
    sizes are compared with the limits at their hints (``symbols``)."""
    return not_recomputable(node, graph_meta, config, symbols) is None


def not_recomputable(node: Node, graph_meta: Mapping[str, object], config: AotConfig,
                     symbols: Mapping[str, SymbolRange] | None = None) -> str | None:
    """Why ``node``'s value is never recomputed in the backward graph (``EMBER_LOGS=
    partition`` prints it), or None when it may be."""
    if node.op != "call":
        return None if node.op in ("constant", "get_attr") else SAVED_INPUT
    if node.target in COMPUTE_BOUND_OPS:
        return "never recomputed: compute-bound (matmul, convolution, attention)"
    if node.target.partition("::")[0] not in ("aten", "prims"):
        # a custom operator: its cost is unknown, and it may not be pure
        return "never recomputed: a custom operator"
    if is_random(node.target):
        return "never recomputed: random"
    if recompute_kind(node.target) is None:
        return "never recomputed: not pointwise, a view or a cheap op (recompute_rules.py)"
    if is_reduction(node.target):
        biggest = max((hint(_numel(graph_meta.get(r.node), r.index), symbols or {})
                       for r in node.inputs()), default=0)
        if biggest > config.recompute_reduction_limit:
            return (f"never recomputed: a reduction over {biggest} elements (limit "
                    f"{config.recompute_reduction_limit})")
    return None


def _numel(meta: object, index: int | None) -> SymInt:
    if isinstance(meta, tuple) and index is not None:
        meta = meta[index]
    if isinstance(meta, TensorMeta):
        return numel(meta)
    return 0


def partition(graph: Graph, n_forward_outputs: int, n_tangents: int,
              config: AotConfig) -> Partition:
    """Split ``graph`` (a joint graph: primals, then ``n_tangents`` tangent placeholders;
    forward outputs, then gradients) into forward and backward graphs.

    With ``config.save_everything`` every forward value the backward reads is saved and
    nothing is recomputed; otherwise the saved bytes are minimal (see module docstring).
    """
    placeholders = graph.placeholders
    tangents = {p.name for p in placeholders[len(placeholders) - n_tangents:]}
    outputs = graph.output_values
    fw_outputs, bw_outputs = outputs[:n_forward_outputs], outputs[n_forward_outputs:]
    nodes = {n.name: n for n in graph.nodes if n.op != "output"}
    meta: dict[str, object] = {n.name: n.meta for n in graph.nodes}

    tangent_dependent: set[str] = set()
    for n in graph.nodes:
        if n.name in tangents or any(r.node in tangent_dependent for r in n.inputs()):
            tangent_dependent.add(n.name)
    fw_required = _ancestors(nodes, _refs(fw_outputs))
    bw_required = _ancestors(nodes, _refs(bw_outputs))

    pinned = read_by_both(nodes, tangent_dependent, fw_required, COMPUTE_BOUND_OPS) \
        if config.save_conv_inputs and not config.save_everything else set()
    recompute_costs: dict[str, int] = {}
    for r in pinned:  # recomputing writes the value again and reads it back
        cost = 2 * hint(value_bytes(_result_meta(meta, r)), graph.symbols)
        recompute_costs[r.node] = recompute_costs.get(r.node, 0) + cost
    if config.save_everything:
        backward_side = {n for n in bw_required if n in tangent_dependent}
    else:
        backward_side = _min_cut_backward_side(
            graph, nodes, meta, tangent_dependent, fw_required, bw_required, bw_outputs,
            config, recompute_costs)
    saved = _saved_values(graph, backward_side, bw_required, bw_outputs)
    forward = _forward_graph(graph, fw_outputs, saved, tangents)
    backward = _backward_graph(graph, meta, bw_outputs, saved, backward_side, tangents)
    if graph.symbols:
        saved = bind_backward_symbols(forward, backward, saved)
        meta.update({n.name: n.meta for n in forward.nodes})
    recomputed = [n for n in backward_side if n not in tangent_dependent and n in nodes]
    saved_bytes = total(value_bytes(_result_meta(meta, r)) for r in saved)
    if "partition" in TOPICS:  # NOTE: runtimes before the topic have no such channel
        log("partition", lambda: _report(graph, nodes, meta, saved, sorted(recomputed),
                                         saved_bytes, config, pinned))
    return Partition(forward, backward, saved, saved_bytes, sorted(recomputed))


def _report(graph: Graph, nodes: Mapping[str, Node], meta: Mapping[str, object],
            saved: list[ValueRef], recomputed: list[str], saved_bytes: SymInt,
            config: AotConfig, pinned: set[ValueRef]) -> str:
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    recomputed = sorted(recomputed, key=order.__getitem__)  # graph order
    refs = saved + [ValueRef(n) for n in recomputed]
    value_meta = {r: _result_meta(meta, r) for r in refs}
    why = {r.node: reason for r in saved if r.node in nodes
           for reason in [not_recomputable(nodes[r.node], meta, config, graph.symbols)]
           if reason is not None}
    why.update((r.node if r.index is None else f"{r.node}[{r.index}]", SAVED_FOR_EXTERN)
               for r in saved if r in pinned and r.node not in why)
    if config.save_everything:
        why.update((r.node, "aot.save_everything") for r in saved if r.node not in why)
    return format_partition(saved, recomputed, nodes, value_meta, saved_bytes, why,
                            graph.symbols, {r: value_bytes(m) for r, m in value_meta.items()})


def _refs(values: tuple[Argument, ...]) -> list[ValueRef]:
    return [v for v in values if isinstance(v, ValueRef)]


def _result_meta(meta: Mapping[str, object], ref: ValueRef) -> object:
    m = meta.get(ref.node)
    return m[ref.index] if isinstance(m, tuple) and ref.index is not None else m


def _ancestors(nodes: dict[str, Node], roots: list[ValueRef]) -> set[str]:
    # a node whose sizes or arguments use u0 of an int(u0) result (.item()) needs the
    # node that binds it, though it reads no value of it
    binders = {m.symbol: n.name for n in nodes.values()
               for m in (n.meta if isinstance(n.meta, tuple) else (n.meta,))
               if isinstance(m, ScalarMeta) and m.symbol is not None}
    # a fresh buffer a custom operator writes holds its value only after that call
    writers = written_by(nodes.values())
    seen: set[str] = set()
    stack = [r.node for r in roots]
    while stack:
        name = stack.pop()
        if name in seen or name not in nodes:
            continue
        seen.add(name)
        stack.extend(r.node for r in nodes[name].inputs())
        if name in writers:
            stack.append(writers[name])
        if binders:
            stack.extend(binders[s] for s in node_symbols(nodes[name]) if s in binders)
    return seen


def written_by(nodes: Iterable[Node]) -> dict[str, str]:
    """Fresh buffers a custom operator writes (``ember.runtime.ir.fresh_writes``): the
    written value's node -> the writing call's node. The buffer's readers depend on the
    call; the buffer is never recomputed (the backward would read it unwritten)."""
    found: dict[str, str] = {}
    for node in nodes:
        if node.op == "call" and node.target.partition("::")[0] not in ("aten", "prims"):
            found.update((ref.node, node.name) for ref in written_values(node))
    return found


def _min_cut_backward_side(
    graph: Graph, nodes: dict[str, Node], meta: Mapping[str, object],
    tangent_dependent: set[str], fw_required: set[str], bw_required: set[str],
    bw_outputs: tuple[Argument, ...], config: AotConfig, recompute_costs: dict[str, int],
) -> set[str]:
    """The nodes the backward graph computes: those that depend on a tangent, plus
    those on the sink side of the minimum cut (recomputed). Recomputing a node of
    ``recompute_costs`` costs that many bytes more than its saved bytes
    (:mod:`ember.aot.partition.extern_reads`).

    Vertices: ``(node, "in")`` (the node runs on the source side: in forward) and, per
    result ``r`` of the node, ``(r, "out")``; ``(node, "in") -> (r, "out")`` costs the
    bytes of saving ``r``.
    """
    symbols = graph.symbols
    net = FlowNetwork()
    source, sink = ("source",), ("sink",)
    net.vertex(source)
    net.vertex(sink)
    writers = written_by(nodes.values())
    for name in bw_required | fw_required:
        node = nodes[name]
        if name in writers and writers[name] in tangent_dependent:
            net.add_edge((name, "in"), sink, INFINITE)  # written in the backward graph
        if name in tangent_dependent:
            net.add_edge((name, "in"), sink, INFINITE)
            for r in node.inputs():
                if r.node not in tangent_dependent:
                    net.add_edge((r, "out"), sink, INFINITE)
            continue
        node_meta = meta[name]
        results = ([ValueRef(name, i) for i in range(len(node_meta))]
                   if isinstance(node_meta, tuple) else [ValueRef(name)])
        for r in results:
            net.add_edge((name, "in"), (r, "out"),
                         hint(value_bytes(_result_meta(meta, r)), symbols))
        # NOTE: a value the forward graph computes anyway may still be recomputed in the
        # backward graph (cheaper than saving it); only inputs and values that must not
        # be recomputed are tied to the source.
        written_in_forward = name in writers and writers[name] not in tangent_dependent
        if (node.op == "placeholder" or written_in_forward
                or not is_recomputable(node, meta, config, symbols)):
            net.add_edge(source, (name, "in"), INFINITE)
        elif name in recompute_costs:
            net.add_edge(source, (name, "in"), recompute_costs[name])
        elif name in fw_required and recompute_kind(node.target) == "pointwise":
            net.add_edge(source, (name, "in"), RECOMPUTE_TIE_BREAK)
        for r in node.inputs():
            net.add_edge((r, "out"), (name, "in"), INFINITE)
    for r in _refs(bw_outputs):
        if r.node not in tangent_dependent:
            net.add_edge((r, "out"), sink, INFINITE)
    _, source_side = net.min_cut(source, sink)
    recomputed = {name for name in bw_required - tangent_dependent
                  if (name, "in") not in source_side}
    # NOTE: a node with no inputs that only a saved value reads (the ``empty_strided``
    # a dropout mask is drawn into: the random op itself is never recomputed) is not
    # reachable from the source, so the cut puts it on the sink side; the backward graph
    # keeps only what its outputs read.
    side = (bw_required & tangent_dependent) | recomputed
    return _ancestors({n: nodes[n] for n in side}, _refs(bw_outputs))


def _saved_values(graph: Graph, backward_side: set[str], bw_required: set[str],
                  bw_outputs: tuple[Argument, ...]) -> list[ValueRef]:
    """Values computed in forward that the backward side reads (graph order)."""
    wanted: set[ValueRef] = set()
    for n in graph.nodes:
        if n.name in backward_side:
            wanted.update(r for r in n.inputs() if r.node not in backward_side)
    wanted.update(r for r in _refs(bw_outputs) if r.node not in backward_side)
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    return sorted(wanted, key=lambda r: (order[r.node], -1 if r.index is None else r.index))


def _forward_graph(graph: Graph, fw_outputs: tuple[Argument, ...], saved: list[ValueRef],
                   tangents: set[str]) -> Graph:
    nodes = {n.name: n for n in graph.nodes if n.op != "output"}
    keep = _ancestors(nodes, _refs(fw_outputs) + saved)
    for n in graph.nodes:  # an assert of the forward (no result anyone reads) runs there
        if n.op == "call" and n.name not in keep and has_side_effects(n.target):
            needs = _ancestors(nodes, [ValueRef(n.name)])
            if not needs & tangents:
                keep |= needs
    out = Graph(symbols=dict(graph.symbols), guards=list(graph.guards))
    for n in graph.nodes:
        if n.op == "placeholder" and n.name not in tangents or n.op != "placeholder" and n.op != "output" and n.name in keep:
            out.nodes.append(_clone(n))
    out.nodes.append(Node("output", "output", "output", (tuple(fw_outputs) + tuple(saved),)))
    return out


def saved_name(ref: ValueRef) -> str:
    """The backward placeholder name of saved value ``ref``."""
    return f"saved_{ref.node}" if ref.index is None else f"saved_{ref.node}_{ref.index}"


def _backward_graph(graph: Graph, meta: Mapping[str, object], bw_outputs: tuple[Argument, ...],
                    saved: list[ValueRef], backward_side: set[str], tangents: set[str]) -> Graph:
    out = Graph(symbols=dict(graph.symbols))
    mapping: dict[ValueRef, Argument] = {}
    for ref in saved:
        name = saved_name(ref)
        saved_meta = _result_meta(meta, ref)
        assert isinstance(saved_meta, (TensorMeta, ScalarMeta))
        out.nodes.append(Node(name, "placeholder", name, meta=saved_meta))
        mapping[ref] = ValueRef(name)
    for n in graph.nodes:
        if n.op == "placeholder" and n.name in tangents:
            out.nodes.append(_clone(n))
    for n in graph.nodes:
        if n.op in ("call", "constant", "get_attr") and n.name in backward_side:
            c = _clone(n)
            c.replace_refs(mapping)
            out.nodes.append(c)
    results = tuple(mapping.get(v, v) if isinstance(v, ValueRef) else v for v in bw_outputs)
    out.nodes.append(Node("output", "output", "output", (results,)))
    return out


def _clone(n: Node) -> Node:
    return Node(n.name, n.op, n.target, n.args, dict(n.kwargs), n.meta, n.source)
