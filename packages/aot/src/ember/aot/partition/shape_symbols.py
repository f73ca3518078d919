"""The size symbols of a partitioned backward graph.

The backward graph binds its symbols from its own placeholders (saved values and
tangents), as every graph does (:class:`ember.runtime.ir.symbolic.SymbolBinder`): a
symbol is bound by the first placeholder that has it as a plain size. When the backward
uses a symbol that none of them carries that way (``x.sum()``'s gradient expands a
scalar tangent back to ``x``'s ``[s0, 4]``; a flattened output's tangent is ``[4*s0]``),
the forward also saves a *size carrier*: an empty ``uint8`` tensor of sizes
``[s0, ..., 0]`` (no bytes) whose plain sizes bind the missing symbols.

Unbacked symbols (``u0``: the forward binds them from ``.item()``'s ``int(u0)`` or a
data-dependent op's result: ``x[:n.item()]``'s backward pads ``[u0, 8]`` back into
``x``) are carried the same way, each by a carrier ``[u0, 0]`` of its own: an unbacked
symbol may be 0, and torch's strides of ``[s0, u0, 0]`` would then depend on it
(``Max(1, u0)``), those of ``[u0, 0]`` are ``(1, 1)`` whatever its value. A symbol
that may be negative is no size: it is saved as a cpu ``int64`` scalar that the backward
reads back with ``_local_scalar_dense``. A backward node whose result has ``u0`` as a
plain size binds it only
when no earlier node (nor placeholder expression) uses it and its arguments do not
(``view(%g, [4, sym(u0), 8])`` *needs* ``u0``; a recomputed ``nonzero`` binds it), as
the verifier and :class:`~ember.runtime.ir.symbolic.SymbolBinder` read the graph in
order.
"""

from __future__ import annotations

import torch
from ember.aot.symbolic_sizes import (
    argument_symbols,
    contiguous_strides,
    graph_symbols,
    meta_symbols,
    placeholder_bound_symbols,
)
from ember.runtime.ir import Graph, Node, ScalarMeta, SymInt, TensorMeta, ValueRef, symbolic
from ember.runtime.ir.graph import SymExpr

SIZE_CARRIER = "sizes_for_backward"
"""The forward node (and, as ``saved_sizes_for_backward``, the backward placeholder)
that carries the symbols the backward graph cannot bind otherwise; each such symbol
that may be 0 (unbacked) has a carrier ``sizes_for_backward_u0`` of its own."""

VALUE_CARRIER = "value_for_backward"
"""The forward node that carries a symbol that may be negative (``k.item()`` used as a
number: its range is ``[-inf, inf]``) as a cpu ``int64`` scalar; the backward reads it
back with ``aten::_local_scalar_dense`` (``u0_from_forward``)."""


def bind_backward_symbols(forward: Graph, backward: Graph,
                          saved: list[ValueRef]) -> list[ValueRef]:
    """Restrict ``backward``'s symbol table to the symbols it uses and make sure each is
    bound by one of its placeholders (adding size carriers to both graphs when not);
    return the saved values, with the carriers last when some were added. The backward
    graph has no guards: the forward call has checked them."""
    used = graph_symbols(backward)
    backward.symbols = {s: r for s, r in forward.symbols.items() if s in used}
    backward.guards = []
    missing = sorted(unbound_symbols(backward), key=_symbol_order)
    if not missing:
        return saved
    # NOTE: torch's strides of an empty tensor count each later size below 1 as 1; a
    # symbol that may be 0 (unbacked) is dim 0 of a carrier of its own, whose strides
    # are then (1, 1) for every value
    groups = [[s for s in missing if forward.symbols[s].lower >= 1]]
    groups += [[s] for s in missing if 0 <= forward.symbols[s].lower < 1]
    carriers = [_carrier_node(forward, group) for group in groups if group]
    signed = [s for s in missing if forward.symbols[s].lower < 0]
    held = [_value_carrier_node(forward, s) for s in signed]
    carriers += held
    output = forward.nodes.pop()
    forward.nodes.extend(carriers)
    values = output.args[0]
    assert isinstance(values, tuple)
    output.args = ((*values, *(ValueRef(c.name) for c in carriers)),)
    forward.nodes.append(output)
    # NOTE: the backward graph starts with one placeholder per saved value, in order.
    for i, carrier in enumerate(carriers):
        backward.nodes.insert(len(saved) + i, Node(
            f"saved_{carrier.name}", "placeholder", f"saved_{carrier.name}",
            meta=carrier.meta))
    first_node = len(backward.placeholders)
    for i, (symbol, carrier) in enumerate(zip(signed, held)):  # int(u0) read back
        backward.nodes.insert(first_node + i, Node(
            f"{symbol}_from_forward", "call", "aten::_local_scalar_dense.default",
            (ValueRef(f"saved_{carrier.name}"),), meta=ScalarMeta("int", symbol)))
    return [*saved, *(ValueRef(c.name) for c in carriers)]


def unbound_symbols(graph: Graph) -> set[str]:
    """The symbols ``graph`` uses before anything binds them, read in graph order as
    the verifier does: placeholders bind their plain sizes before any node runs; a node
    uses the symbols of its ``sym(...)`` arguments, then binds the plain sizes (and the
    ``int(u0)`` symbol) of its results, then uses those of its results' layouts."""
    bound = placeholder_bound_symbols(graph)
    unbound: set[str] = set()
    for node in graph.nodes:
        if node.op == "placeholder":
            unbound |= meta_symbols(node.meta) - bound
            continue
        for a in (*node.args, *node.kwargs.values()):
            unbound |= argument_symbols(a) - bound
        bound |= _plain_symbols(node.meta)
        unbound |= meta_symbols(node.meta) - bound
    return unbound


def _plain_symbols(meta: object) -> set[str]:
    found: set[str] = set()
    for m in meta if isinstance(meta, tuple) else (meta,):
        if isinstance(m, TensorMeta):
            found |= {s.strip() for s in m.sizes
                      if isinstance(s, str) and symbolic.is_symbol(s)}
        elif isinstance(m, ScalarMeta) and m.symbol is not None:
            found.add(m.symbol.strip())
    return found


def _symbol_order(name: str) -> tuple[str, int, str]:
    digits = name.lstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
    return (name[: len(name) - len(digits)], int(digits) if digits.isdigit() else -1, name)


def _value_carrier_node(forward: Graph, symbol: str) -> Node:
    """``aten::scalar_tensor(u0, dtype=int64)`` on the cpu, named
    ``value_for_backward_u0``: a symbol that may be negative (an ``.item()`` used as a
    number) is no size, so it is carried as a value the backward reads back."""
    taken = {n.name for n in forward.nodes}
    name = f"{VALUE_CARRIER}_{symbol}"
    while name in taken:
        name = f"_{name}"
    cpu = torch.device("cpu")
    return Node(name, "call", "aten::scalar_tensor.default", (SymExpr(symbol),),
                {"dtype": torch.int64, "device": cpu}, meta=TensorMeta(torch.int64, (), (), cpu))


def _carrier_node(forward: Graph, symbols: list[str]) -> Node:
    """``aten::empty.memory_format([s0, ..., 0], dtype=uint8)`` on the forward's device;
    named ``sizes_for_backward`` (symbols of at least 1) or ``sizes_for_backward_u0``
    (one symbol that may be 0)."""
    device = next((p.meta.device for p in forward.placeholders
                   if isinstance(p.meta, TensorMeta)), torch.device("cpu"))
    sizes: tuple[SymInt, ...] = (*(symbolic.canonical(s) for s in symbols), 0)
    taken = {n.name for n in forward.nodes}
    name = SIZE_CARRIER if forward.symbols[symbols[0]].lower >= 1 else \
        f"{SIZE_CARRIER}_{symbols[0]}"
    while name in taken:
        name = f"_{name}"
    meta = TensorMeta(torch.uint8, sizes, contiguous_strides(sizes), device)
    args = tuple(SymExpr(s) if isinstance(s, str) else s for s in sizes)
    return Node(name, "call", "aten::empty.memory_format", (args,),
                {"dtype": torch.uint8, "device": device}, meta=meta)
