"""Common-subexpression elimination: one node per distinct pure call."""

from __future__ import annotations

import math

from ember.inductor.passes.common import is_pure
from ember.runtime.ir import Argument, Program, ValueRef


def _key(node_target: str, args: tuple[Argument, ...], kwargs: dict[str, Argument]
         ) -> tuple[object, ...]:
    return (node_target, _freeze(args), tuple(sorted((k, _freeze(v)) for k, v in kwargs.items())))


def _freeze(a: object) -> object:
    # NOTE: type is part of the key: 1, 1.0 and True are equal in Python but not as args
    if isinstance(a, tuple):
        return tuple(_freeze(x) for x in a)
    if isinstance(a, float) and math.isnan(a):
        return ("nan",)
    return (type(a).__name__, a)


def common_subexpression_elimination(program: Program) -> Program:
    """A copy of ``program`` where a pure call repeating an earlier one (same target,
    same arguments after replacement) is replaced by the earlier node's result."""
    result = program.copy()
    for graph in result.graphs.values():
        seen: dict[tuple[object, ...], str] = {}
        mapping: dict[ValueRef, Argument] = {}
        renamed: dict[str, str] = {}
        kept = []
        for node in graph.nodes:
            if mapping:
                node.replace_refs(mapping)
            if node.op == "call" and is_pure(node.target):
                key = _key(node.target, node.args, node.kwargs)
                if key in seen:
                    original = seen[key]
                    renamed[node.name] = original
                    mapping[ValueRef(node.name)] = ValueRef(original)
                    for i in range(len(node.meta) if isinstance(node.meta, tuple) else 0):
                        mapping[ValueRef(node.name, i)] = ValueRef(original, i)
                    continue
                seen[key] = node.name
            kept.append(node)
        graph.nodes = kept
    return result
