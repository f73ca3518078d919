"""Dead-code elimination: drop pure calls and constants whose results nobody reads."""

from __future__ import annotations

from ember.inductor.passes.common import is_pure
from ember.runtime.ir import Program


def dead_code_elimination(program: Program) -> Program:
    """A copy of ``program`` without unused pure ``call``/``constant``/``get_attr`` nodes
    (placeholders always stay: they are the graph's interface)."""
    result = program.copy()
    for graph in result.graphs.values():
        used: set[str] = set()
        kept = []
        for node in reversed(graph.nodes):
            removable = (
                (node.op == "call" and is_pure(node.target))
                or node.op in ("constant", "get_attr")
            )
            if removable and node.name not in used:
                continue
            kept.append(node)
            used.update(r.node for r in node.inputs())
        graph.nodes = list(reversed(kept))
    _drop_unreferenced_tensors(result)
    return result


def _drop_unreferenced_tensors(program: Program) -> None:
    """Forget constants no node or input spec names any more (e.g. folded away)."""
    referenced = {n.target for g in program.graphs.values() for n in g.nodes
                  if n.op in ("constant", "get_attr")}
    referenced |= {spec.target for specs in program.signature.inputs.values()
                   for spec in specs if spec.target is not None}
    program.tensors = {k: v for k, v in program.tensors.items() if k in referenced}
