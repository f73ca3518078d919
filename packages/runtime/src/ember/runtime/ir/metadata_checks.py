"""The metadata a program read from a file declares, checked against its operators.

A stage trusts each node's metadata: the inductor allocates buffers and indexes its
kernels' loads by the sizes and strides a node declares. A crafted file that verified
could declare a result larger than its operator makes (``%relu: f32[2000, 4]`` of a
``[2, 4]`` input), and the compiled code then read past its buffers. So
:func:`~ember.runtime.ir.verify` of a program read from a file
(``program.untrusted_origin`` set), in the ``aten`` or ``core-functional`` dialect, runs
:func:`check_declared_metadata`: each graph runs on fake tensors (no data) made from its
placeholders' metadata, sizes at the symbols' hints, and each ``call`` node's result is
compared with what the node declares: dtype, sizes and strides.

What it cannot check it takes on the file's word: a node whose operator fails on fake
tensors (a data-dependent size, no fake kernel) gets a fake of its declared metadata
for the nodes after it; a graph with unbacked (data-dependent) symbols or scalar inputs
is not run. Programs the recorders make in a process are not checked (they are built
from the operators' own results).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from ember.runtime.ir._torch import fake_tensor_mode
from ember.runtime.ir.errors import VerificationError
from ember.runtime.ir.graph import Graph, Node, Program, SymExpr, TensorMeta, ValueRef
from ember.runtime.ir.ops import resolve_op
from ember.runtime.ir.symbolic import evaluate

__all__ = ["CHECKED_DIALECTS", "check_declared_metadata"]

#: the dialects whose node metadata stages compile from (a ``compiled`` artifact's code
#: is refused from an untrusted file anyway: ``ember.runtime.ir.effects``)
CHECKED_DIALECTS = ("aten", "core-functional")


def check_declared_metadata(program: Program) -> None:
    """Raise :class:`~ember.runtime.ir.VerificationError` naming the first placeholder
    no tensor can have, or ``call`` node whose declared dtype, sizes or strides differ
    from its operator's result (see the module docstring)."""
    if program.dialect not in CHECKED_DIALECTS:
        return
    for name, graph in program.graphs.items():
        if any(r.hint is None for r in graph.symbols.values()) or not all(
                isinstance(n.meta, TensorMeta) for n in graph.placeholders):
            continue  # an unbacked symbol or a scalar input: no fakes to make
        hints = {s: int(r.hint) for s, r in graph.symbols.items() if r.hint is not None}
        with fake_tensor_mode():
            _run(name, graph, program, hints)


def _run(name: str, graph: Graph, program: Program, symbols: Mapping[str, int]) -> None:
    values: dict[str, Any] = {}

    def load(arg: Any) -> Any:
        if isinstance(arg, ValueRef):
            value = values[arg.node]
            return value if arg.index is None else value[arg.index]
        if isinstance(arg, tuple):
            return [load(a) for a in arg]
        return evaluate(arg.expr, symbols) if isinstance(arg, SymExpr) else arg

    for node in graph.nodes:
        if node.op == "placeholder":
            assert isinstance(node.meta, TensorMeta)
            values[node.name] = _placeholder(name, node, node.meta, symbols)
        elif node.op in ("get_attr", "constant"):
            values[node.name] = program.tensors[node.target]
        elif node.op == "call":
            try:
                result = resolve_op(node.target)(*[load(a) for a in node.args],
                                                 **{k: load(v) for k, v in node.kwargs.items()})
            except Exception:  # noqa: BLE001 - unknowable here: the file's word
                values[node.name] = _declared(node, symbols)
                continue
            _compare(name, node, result, symbols)
            values[node.name] = result


def _compare(graph: str, node: Node, result: Any, symbols: Mapping[str, int]) -> None:
    metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
    results = result if isinstance(result, (tuple, list)) else (result,)
    for i, (meta, value) in enumerate(zip(metas, results)):
        if not (isinstance(meta, TensorMeta) and isinstance(value, torch.Tensor)):
            continue
        sizes = tuple(evaluate(s, symbols) for s in meta.sizes)
        strides = tuple(evaluate(s, symbols) for s in meta.strides)
        actual = (value.dtype, tuple(value.shape), value.stride())
        if (meta.dtype, sizes, strides) == actual or (
                (meta.dtype, sizes) == actual[:2] and value.numel() <= 1):
            continue  # (the strides of a tensor of at most one element say nothing)
        which = f" result {i}" if len(metas) > 1 else ""
        raise VerificationError(
            f"graph {graph!r}, node %{node.name} ({node.target}){which}: the file declares "
            f"{meta.dtype} sizes {sizes} strides {strides}, but the operator makes "
            f"{actual[0]} sizes {actual[1]} strides {actual[2]} (at the symbols' hints)")


def _placeholder(graph: str, node: Node, meta: TensorMeta,
                 symbols: Mapping[str, int]) -> torch.Tensor:
    try:
        return _fake(meta, symbols)
    except (RuntimeError, ValueError, OverflowError) as e:  # (numel overflows int64)
        raise VerificationError(
            f"graph {graph!r}, placeholder %{node.name}: no tensor has the declared sizes "
            f"{meta.sizes} and strides {meta.strides} ({e})") from None


def _fake(meta: TensorMeta, symbols: Mapping[str, int]) -> torch.Tensor:
    return torch.empty_strided([evaluate(s, symbols) for s in meta.sizes],
                               [evaluate(s, symbols) for s in meta.strides],
                               dtype=meta.dtype, device=meta.device)


def _declared(node: Node, symbols: Mapping[str, int]) -> Any:
    """Fakes of ``node``'s declared metadata (what the nodes after it read)."""
    metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
    fakes = [_fake(m, symbols) if isinstance(m, TensorMeta) else None for m in metas]
    return tuple(fakes) if isinstance(node.meta, tuple) else fakes[0]
