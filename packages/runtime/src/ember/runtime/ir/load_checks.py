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
from typing import NoReturn

from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.graph import DIALECTS, OPCODES, Graph, Node, Program, ValueRef, refs_in
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
    # NOTE: runs once per node of every program loaded: the message's prefix is
    # formatted only for an error, and arguments are looked at without a generator
    defined: set[str] = set()
    tensors = program.tensors
    for i, node in enumerate(graph.nodes):
        op = node.op
        if op not in OPCODES:
            raise IRFormatError(f"{_where(locate, graph_name, i, node)}: unknown opcode "
                                f"{op!r} (one of {list(OPCODES)})")
        for arguments in (node.args, node.kwargs.values()):
            for a in arguments:
                if type(a) is ValueRef:
                    if a.node not in defined:
                        _undefined(a, locate, graph_name, i, graph)
                elif isinstance(a, (tuple, ValueRef)):
                    for ref in refs_in((a,)):
                        if ref.node not in defined:
                            _undefined(ref, locate, graph_name, i, graph)
        if node.name in defined:
            raise IRFormatError(f"{_where(locate, graph_name, i, node)}: the name "
                                f"%{node.name} is defined twice")
        defined.add(node.name)
        if op == "call":
            try:
                resolve_op(node.target)
            except IRFormatError as e:
                raise IRFormatError(f"{_where(locate, graph_name, i, node)}: {e}") from None
        elif op in ("get_attr", "constant") and node.target not in tensors:
            raise IRFormatError(f"{_where(locate, graph_name, i, node)}: {op} reads tensor "
                                f"{node.target!r}, which the program does not carry")


def _where(locate: NodeLocator, graph_name: str, index: int, node: Node) -> str:
    return f"{locate(graph_name, index)}graph {graph_name!r}, node {index} (%{node.name})"


def _undefined(ref: ValueRef, locate: NodeLocator, graph_name: str, index: int,
               graph: Graph) -> NoReturn:
    node = graph.nodes[index]
    problem = "itself" if ref.node == node.name else (
        "a value defined later" if any(n.name == ref.node for n in graph.nodes)
        else "an undefined value")
    raise IRFormatError(f"{_where(locate, graph_name, index, node)}: uses %{ref.node}, "
                        f"{problem} (graphs are SSA: define a value before its use)")
