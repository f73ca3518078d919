"""The cheap structural checks every loaded or parsed program passes.

These run on each :func:`~ember.runtime.ir.load` and
:func:`~ember.runtime.ir.parse_program`, so that a crafted or corrupt file fails with a
clear :class:`IRFormatError` at the boundary instead of deep inside a stage. They are
the format's part of the rules; the verifier checks the rest (metadata consistency,
dialect rules).

Checked: the dialect and each node's opcode are known; node names are unique in their
graph; every value is defined before it is used (which also rules out cycles); ``call``
targets resolve to a registered operator; ``get_attr``/``constant`` targets name a
tensor of the program.
"""

from __future__ import annotations

from collections.abc import Callable

from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.graph import DIALECTS, OPCODES, Graph, Program
from ember.runtime.ir.ops import resolve_op

# Where a node came from, for messages: (graph name, node index) -> "line 12: ".
NodeLocator = Callable[[str, int], str]


def check_program(program: Program, locate: NodeLocator | None = None) -> None:
    """Check the structure of ``program``.

    Args:
        program: the program to check.
        locate: gives a prefix naming where a node was read from (the parser's line).

    Raises:
        IRFormatError: naming the graph and node of the first problem found.
    """
    if program.dialect not in DIALECTS:
        raise IRFormatError(f"unknown dialect {program.dialect!r} (one of {list(DIALECTS)})")
    for name, graph in program.graphs.items():
        _check_graph(name, graph, program, locate or (lambda g, i: ""))


def _check_graph(graph_name: str, graph: Graph, program: Program, locate: NodeLocator) -> None:
    defined: set[str] = set()
    for i, node in enumerate(graph.nodes):
        where = f"{locate(graph_name, i)}graph {graph_name!r}, node {i} (%{node.name})"
        if node.op not in OPCODES:
            raise IRFormatError(f"{where}: unknown opcode {node.op!r} (one of {list(OPCODES)})")
        for ref in node.inputs():
            if ref.node not in defined:
                problem = "itself" if ref.node == node.name else (
                    "a value defined later" if any(n.name == ref.node for n in graph.nodes)
                    else "an undefined value")
                raise IRFormatError(f"{where}: uses %{ref.node}, {problem} "
                                    "(graphs are SSA: define a value before its use)")
        if node.name in defined:
            raise IRFormatError(f"{where}: the name %{node.name} is defined twice")
        defined.add(node.name)
        if node.op == "call":
            try:
                resolve_op(node.target)
            except IRFormatError as e:
                raise IRFormatError(f"{where}: {e}") from None
        elif node.op in ("get_attr", "constant") and node.target not in program.tensors:
            raise IRFormatError(f"{where}: {node.op} reads tensor {node.target!r}, "
                                "which the program does not carry")
