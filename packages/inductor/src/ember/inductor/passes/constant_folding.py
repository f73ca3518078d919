"""Constant folding of small constants: a pure call whose tensor inputs are all small
constants (or which has none, like ``full``) is evaluated once at compile time and
replaced by a ``constant`` node."""

from __future__ import annotations

from typing import Any

import torch
from ember.runtime.ir import Argument, Node, Program, TensorMeta, ValueRef, is_pure, resolve_op

# Fold only results up to this many elements (bigger constants bloat the artifact).
MAX_FOLDED_NUMEL = 64


def _evaluate(a: Argument, values: dict[str, torch.Tensor]) -> Any:
    if isinstance(a, ValueRef):
        v = values[a.node]
        return v
    if isinstance(a, tuple):
        return [_evaluate(x, values) for x in a]
    return a


def constant_folding(program: Program) -> Program:
    """A copy of ``program`` with small constant subexpressions computed."""
    result = program.copy()
    for gname, graph in result.graphs.items():
        known: dict[str, torch.Tensor] = {}
        for i, node in enumerate(graph.nodes):
            if node.op in ("constant", "get_attr"):
                t = result.tensors.get(node.target)
                if node.op == "constant" and t is not None and t.numel() <= MAX_FOLDED_NUMEL:
                    known[node.name] = t
                continue
            if node.op != "call" or not is_pure(node.target):
                continue
            refs = list(node.inputs())
            if any(r.node not in known or r.index is not None for r in refs):
                continue
            meta = node.meta
            if not isinstance(meta, TensorMeta) or not meta.is_static:
                continue
            if meta.numel > MAX_FOLDED_NUMEL or meta.device.type != "cpu":
                continue
            try:
                value = resolve_op(node.target)(
                    *[_evaluate(a, known) for a in node.args],
                    **{k: _evaluate(v, known) for k, v in node.kwargs.items()})
            except Exception:  # noqa: BLE001, S112 - an op that cannot run now is left alone
                continue
            if not isinstance(value, torch.Tensor):
                continue
            name = _fresh_tensor_name(result, gname, node)
            result.tensors[name] = value.detach().clone()
            graph.nodes[i] = Node(name=node.name, op="constant", target=name, meta=node.meta,
                                  source=node.source)
            known[node.name] = value
    return result


def _fresh_tensor_name(program: Program, graph: str, node: Node) -> str:
    base = f"_folded.{graph}.{node.name}"
    name, k = base, 0
    while name in program.tensors:
        k += 1
        name = f"{base}.{k}"
    return name
