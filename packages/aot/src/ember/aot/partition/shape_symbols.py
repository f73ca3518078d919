"""The size symbols of a partitioned backward graph.

The backward graph binds its symbols from its own placeholders (saved values and
tangents), as every graph does (:class:`ember.runtime.ir.symbolic.SymbolBinder`): a
symbol is bound by the first placeholder that has it as a plain size. When the backward
uses a symbol that none of them carries that way (``x.sum()``'s gradient expands a
scalar tangent back to ``x``'s ``[s0, 4]``; a flattened output's tangent is ``[4*s0]``),
the forward also saves a *size carrier*: an empty ``uint8`` tensor of sizes
``[s0, ..., 0]`` (no bytes) whose plain sizes bind the missing symbols.
"""

from __future__ import annotations

import torch
from ember.aot.symbolic_sizes import (
    contiguous_strides,
    graph_symbols,
    placeholder_bound_symbols,
)
from ember.runtime.ir import Graph, Node, SymInt, TensorMeta, ValueRef, symbolic
from ember.runtime.ir.graph import SymExpr

SIZE_CARRIER = "sizes_for_backward"
"""The forward node (and, as ``saved_sizes_for_backward``, the backward placeholder)
that carries the symbols the backward graph cannot bind otherwise."""


def bind_backward_symbols(forward: Graph, backward: Graph,
                          saved: list[ValueRef]) -> list[ValueRef]:
    """Restrict ``backward``'s symbol table to the symbols it uses and make sure each is
    bound by one of its placeholders (adding a size carrier to both graphs when not);
    return the saved values, with the carrier last when one was added. The backward
    graph has no guards: the forward call has checked them."""
    used = graph_symbols(backward)
    backward.symbols = {s: r for s, r in forward.symbols.items() if s in used}
    backward.guards = []
    missing = sorted(used - placeholder_bound_symbols(backward) - _bound_by_calls(backward),
                     key=_symbol_order)
    if not missing:
        return saved
    carrier = _carrier_node(forward, missing)
    output = forward.nodes.pop()
    forward.nodes.append(carrier)
    values = output.args[0]
    assert isinstance(values, tuple)
    output.args = ((*values, ValueRef(carrier.name)),)
    forward.nodes.append(output)
    placeholder = Node(f"saved_{carrier.name}", "placeholder", f"saved_{carrier.name}",
                       meta=carrier.meta)
    # NOTE: the backward graph starts with one placeholder per saved value, in order.
    backward.nodes.insert(len(saved), placeholder)
    return [*saved, ValueRef(carrier.name)]


def _bound_by_calls(graph: Graph) -> set[str]:
    """Unbacked symbols (no hint) a node of ``graph`` computes as a plain size."""
    unbacked = {s for s, r in graph.symbols.items() if r.hint is None}
    bound: set[str] = set()
    for node in graph.nodes:
        metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
        for meta in metas:
            if isinstance(meta, TensorMeta):
                bound |= {str(s) for s in meta.sizes if s in unbacked}
    return bound


def _symbol_order(name: str) -> tuple[str, int, str]:
    digits = name.lstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
    return (name[: len(name) - len(digits)], int(digits) if digits.isdigit() else -1, name)


def _carrier_node(forward: Graph, symbols: list[str]) -> Node:
    """``aten::empty.memory_format([s0, ..., 0], dtype=uint8)`` on the forward's device."""
    device = next((p.meta.device for p in forward.placeholders
                   if isinstance(p.meta, TensorMeta)), torch.device("cpu"))
    sizes: tuple[SymInt, ...] = (*(symbolic.canonical(s) for s in symbols), 0)
    taken = {n.name for n in forward.nodes}
    name = SIZE_CARRIER
    while name in taken:
        name = f"_{name}"
    meta = TensorMeta(torch.uint8, sizes, contiguous_strides(sizes), device)
    args = tuple(SymExpr(s) if isinstance(s, str) else s for s in sizes)
    return Node(name, "call", "aten::empty.memory_format", (args,),
                {"dtype": torch.uint8, "device": device}, meta=meta)
