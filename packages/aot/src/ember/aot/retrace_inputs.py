"""The inputs of a re-trace, and the shape facts a re-traced graph carries over.

A static graph's placeholders become fake tensors of their exact layout, as they always
did. A symbolic graph (one with ``graph.symbols``) is re-traced under a recorder with a
shape environment: each placeholder is a fake tensor whose sizes, strides and offset are
its IR expressions (:meth:`GraphRecorder.add_meta_input`), so the new graph keeps the
input's symbol names; its ranges and guards are carried over, guards torch adds while
re-tracing are appended, and a symbol the re-trace specialised to a constant is refused
(the frontend guards on the symbol, so the compiled graph would reject calls it was
compiled for).
"""

from __future__ import annotations

import dataclasses

import sympy
import torch
from ember.aot.declines import SymbolicSizesDeclined
from ember.aot.symbolic_sizes import contiguous_strides, graph_is_symbolic, graph_symbols
from ember.runtime.ir import Graph, InputSpec, Program, ScalarMeta, TensorMeta
from ember.runtime.ir.graph import ShapeGuard
from ember.runtime.ir.symbolic import (
    format_relation,
    is_symbol,
    parse,
    parse_relation,
    relation_symbols,
    symbol,
)
from ember.runtime.tracing import GraphRecorder


def new_recorder(graph: Graph, symbolic: bool = False) -> GraphRecorder:
    """A recorder for re-tracing ``graph``: symbolic (own shape environment) when the
    graph is or ``symbolic`` asks for it, else the static one."""
    if symbolic or graph_is_symbolic(graph):
        return GraphRecorder(dynamic=True)
    return GraphRecorder()


def input_metas(graph: Graph) -> list[TensorMeta]:
    """The tensor metadata of each placeholder of ``graph``.

    Raises:
        TypeError: a placeholder has no tensor metadata.
    """
    metas = []
    for p in graph.placeholders:
        if not isinstance(p.meta, TensorMeta):
            raise TypeError(f"placeholder %{p.name} has no tensor metadata; the aot stage "
                            "needs it to re-trace the program")
        metas.append(p.meta)
    return metas


def input_specs(program: Program, graph_name: str) -> list[InputSpec]:
    """The input spec of each placeholder of graph ``graph_name`` (USER_INPUT when the
    signature has none)."""
    graph = program.graphs[graph_name]
    known = {s.name: s for s in program.signature.inputs.get(graph_name, [])}
    return [known.get(p.name, InputSpec(p.name)) for p in graph.placeholders]


def add_inputs(recorder: GraphRecorder, program: Program, graph_name: str,
               requires_grad: list[bool]) -> list[torch.Tensor]:
    """Add one recorder input per placeholder of graph ``graph_name``; return the fakes."""
    graph = program.graphs[graph_name]
    fakes = []
    for meta, grad, spec in zip(input_metas(graph), requires_grad,
                                input_specs(program, graph_name)):
        fakes.append(add_input(recorder, graph, meta, spec, grad))
    return fakes


def add_input(recorder: GraphRecorder, graph: Graph, meta: TensorMeta, spec: InputSpec,
              requires_grad: bool) -> torch.Tensor:
    """One input of layout ``meta``: an exact fake for a static recorder, a fake over
    ``graph``'s symbols for a symbolic one."""
    if recorder.shape_env is None:
        return recorder.add_input(static_fake(recorder, meta, requires_grad), spec)
    fake = recorder.add_meta_input(dataclasses.replace(meta, requires_grad=requires_grad),
                                   spec, graph.symbols)
    if requires_grad and not fake.requires_grad:
        fake.requires_grad_(True)
    return fake


def static_fake(recorder: GraphRecorder, meta: TensorMeta, requires_grad: bool) -> torch.Tensor:
    """A fake tensor of ``meta``'s exact (static) layout in the recorder's mode."""
    with recorder.fake_mode:
        sizes = [int(s) for s in meta.sizes]
        strides = [int(s) for s in meta.strides]
        offset = int(meta.storage_offset)
        extent = 1 + sum((s - 1) * st for s, st in zip(sizes, strides)) if all(sizes) else 0
        flat = torch.empty(offset + extent, dtype=meta.dtype, device=meta.device)
        t = flat.as_strided(sizes, strides, offset)
    if requires_grad:
        t = t.detach().requires_grad_(True)
    return t


def dense(meta: TensorMeta) -> TensorMeta:
    """``meta`` with contiguous strides (tangents are made dense before the backward)."""
    return TensorMeta(meta.dtype, meta.sizes, contiguous_strides(meta.sizes), meta.device)


def recorded_meta(recorder: GraphRecorder, tensor: torch.Tensor) -> TensorMeta:
    """The IR metadata the recorder gave the value ``tensor`` stands for (its sizes in
    the graph's symbols); the tensor's own metadata for a static recorder."""
    if recorder.shape_env is None:
        return TensorMeta.of(tensor)
    ref = recorder.value_of(tensor)
    if ref is None:
        raise TypeError(f"a re-traced output of shape {tuple(tensor.shape)} is not a "
                        "value the recorder produced")
    meta = recorder.graph.node(ref.node).meta
    if isinstance(meta, tuple):
        meta = meta[ref.index or 0]
    if not isinstance(meta, TensorMeta):
        raise TypeError(f"re-traced value {ref} has no tensor metadata")
    return meta


def add_tangent(recorder: GraphRecorder, graph: Graph, output: torch.Tensor,
                name: str) -> torch.Tensor:
    """A dense tangent input named ``name`` shaped like the re-traced ``output``.

    NOTE: a symbolic tangent is made from the output's own symbolic sizes, not from its
    IR text: a data-dependent size the re-trace computed is a new torch symbol that
    only the output carries."""
    if recorder.shape_env is None:
        return add_input(recorder, graph, dense(TensorMeta.of(output)), InputSpec(name), False)
    with recorder.fake_mode:
        fake = torch.empty(output.shape, dtype=output.dtype, device=output.device)
    return recorder.add_input(fake, InputSpec(name))


def carry_shape_facts(original: Graph, traced: Program, graph_name: str) -> None:
    """Give the re-traced graph ``original``'s symbol ranges and guards; guards the
    re-trace added come after them (each once). A guard of ``original`` on an unbacked
    symbol the re-trace no longer has (an op's data-dependent size it computes as an
    expression) is dropped.

    Raises:
        SymbolicSizesDeclined: the re-trace specialised an input symbol to a constant (names the
            symbol, the input and the value).
    """
    if not graph_is_symbolic(original):
        return
    graph = traced.graphs[graph_name]
    _refuse_specialised_inputs(original, graph)
    symbols = dict(original.symbols)
    symbols.update(graph.symbols)
    # an int result's symbol (``.item()``) counts though no size uses it: its range may
    # be an assert's (``torch._check(u0 <= 4)``), checked when the node binds it
    used = graph_symbols(graph) | _scalar_symbols(graph)
    graph.symbols = {s: r for s, r in symbols.items() if s in used}
    carried = _renamed(original.guards, _replaced_symbols(original, graph))
    # NOTE: a data-dependent size that an op of the original made (the slice
    # ``order[:u0]`` of a symbolic ``order`` is ``u2``, guarded ``s1 >= u2``) may be an
    # expression of the re-trace (``Min(s1, u0)``), whose guards on it torch added
    # again: a guard on a symbol no node of the re-trace defines binds nothing
    carried = [g for g in carried if relation_symbols(g.expr) <= used]
    known = {g.expr for g in carried}
    added = [g for g in graph.guards if g.expr not in known]
    graph.guards = _unique(carried + added)


def _scalar_symbols(graph: Graph) -> set[str]:
    """The unbacked symbols int results of ``graph`` bind (``int(u0)``)."""
    found: set[str] = set()
    for node in graph.nodes:
        for meta in node.meta if isinstance(node.meta, tuple) else (node.meta,):
            if isinstance(meta, ScalarMeta) and meta.symbol is not None:
                found.add(meta.symbol)
    return found


def _replaced_symbols(original: Graph, traced: Graph) -> dict[str, str]:
    """Input symbols the re-trace replaced by another expression (torch's shape
    environment unified them: scatter_add's backward makes ``index`` and ``src`` the
    same shape), each with what the traced placeholder has in its place."""
    by_name = {p.name: p for p in traced.placeholders}
    replaced: dict[str, str] = {}
    for before in original.placeholders:
        after = by_name.get(before.name)
        if not (isinstance(before.meta, TensorMeta) and after is not None
                and isinstance(after.meta, TensorMeta)):
            continue
        for old, new in zip(before.meta.sizes, after.meta.sizes):
            if is_symbol(old) and isinstance(new, str) and new != old:
                replaced.setdefault(str(old), new)
    return replaced


def _renamed(guards: list[ShapeGuard], replaced: dict[str, str]) -> list[ShapeGuard]:
    """``guards`` over the traced graph's symbols (one a replacement makes always true
    is dropped): the original's guards named symbols the traced graph no longer has."""
    if not replaced:
        return list(guards)
    mapping = {symbol(old): parse(new) for old, new in replaced.items()}
    out = []
    for g in guards:
        if not relation_symbols(g.expr) & set(replaced):
            out.append(g)
            continue
        rel = parse_relation(g.expr).xreplace(mapping)
        if rel is not sympy.true:
            out.append(dataclasses.replace(g, expr=format_relation(rel)))
    return out


def _unique(guards: list[ShapeGuard]) -> list[ShapeGuard]:
    seen: set[str] = set()
    out = []
    for g in guards:
        if g.expr not in seen:
            seen.add(g.expr)
            out.append(g)
    return out


def _refuse_specialised_inputs(original: Graph, traced: Graph) -> None:
    by_name = {p.name: p for p in traced.placeholders}
    for before in original.placeholders:
        after = by_name.get(before.name)
        if not isinstance(before.meta, TensorMeta) or after is None:
            continue
        if not isinstance(after.meta, TensorMeta):
            continue
        for d, (old, new) in enumerate(zip(before.meta.sizes, after.meta.sizes)):
            if isinstance(old, str) and isinstance(new, int):
                raise SymbolicSizesDeclined(
                    f"the aot stage specialised size {old!r} of input {before.name!r} "
                    f"(dim {d}) to {new}: an operator of the program needs that size "
                    "to be a constant, so the graph cannot be compiled for every size "
                    "its guards allow")
