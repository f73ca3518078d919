"""The guards of a capture with symbolic dimensions, built from its graph (both modes).

After the recorder has finished, each tensor input's placeholder metadata says which of
its sizes are symbols (``s0``), expressions (``2*s0``) or ints (static or specialised),
and the graph's ``guards`` list the relations the program relied on. This module turns
them into :mod:`ember.frontend.size_guards` guards over the inputs' sources: each symbol
is bound by the first input dimension (placeholder order) that has it as its size, with
its range; every other symbolic size is a relation (duck sizing: ``y.size(0) ==
x.size(0)``); inputs without symbolic sizes keep today's exact ``tensor`` guard.
Relations over unbacked (data-dependent) symbols cannot be checked before the graph runs
and are left to the runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from ember.frontend._torch import pinning_source
from ember.frontend.dynamic import DynamicDim, DynamicDimError
from ember.frontend.free_layouts import free_guard
from ember.frontend.guard_model import Guard, Source, tensor_guard
from ember.frontend.size_guards import RelationSource, SizeSource, SymbolicTensor, names_in
from ember.runtime.ir import Graph, ShapeGuard, SourceLocation, TensorMeta
from ember.runtime.logs import log, log_enabled

__all__ = ["SymbolicInput", "input_guards", "install_shape_guards"]


@dataclass(frozen=True)
class SymbolicInput:
    """A tensor input whose dimensions may be symbolic: its placeholder's ``name``, the
    ``source`` it is read from at each call, the real ``tensor`` seen at capture, the
    ``origin`` line of its guards, and the ``fake`` the recorder made for it."""

    name: str
    source: Source
    tensor: torch.Tensor
    origin: SourceLocation | None = None
    fake: torch.Tensor | None = None
    free: bool = False  # a free-layout input (:mod:`.free_layouts`)


def _meta(graph: Graph, name: str) -> TensorMeta:
    for node in graph.nodes:
        if node.op == "placeholder" and node.name == name:
            if not isinstance(node.meta, TensorMeta):
                raise TypeError(f"placeholder {name!r} has no tensor metadata")
            return node.meta
    raise KeyError(f"no placeholder {name!r} in the graph")


def _is_symbolic(meta: TensorMeta) -> bool:
    return any(isinstance(v, str) for v in (*meta.sizes, *meta.strides, meta.storage_offset))


def input_guards(graph: Graph, inputs: Sequence[SymbolicInput]) -> list[Guard]:
    """The guards on ``inputs`` (placeholder order) and on the graph's relations.

    Raises:
        ValueError: a size expression of an input reads a symbol no input binds.
    """
    metas = {inp.name: _meta(graph, inp.name) for inp in inputs}
    bound = _bound_symbols(graph, inputs)
    guards: list[Guard] = []
    relations: list[Guard] = []
    for inp in inputs:
        meta = metas[inp.name]
        if not _is_symbolic(meta) and not inp.free:
            guards.append(_with_origin(tensor_guard(inp.source, inp.tensor), inp.origin))
            continue
        used: dict[str, Source] = {}
        for value in (*meta.sizes, *meta.strides, meta.storage_offset):
            if isinstance(value, str):
                used.update((n, _bound(bound, n, inp)) for n in names_in(value))
        guards.append(free_guard(inp.source, meta, used, inp.origin) if inp.free else Guard(
            "symbolic_tensor", inp.source, SymbolicTensor(
                meta.dtype, meta.sizes, meta.strides, meta.device, meta.requires_grad,
                meta.storage_offset, tuple(used.items()), type(inp.tensor)), inp.origin))
        for d, size in enumerate(meta.sizes):
            here = SizeSource(inp.source, d)
            if not isinstance(size, str):
                continue
            if bound.get(size) == here:
                r = graph.symbols.get(size)
                lower, upper = (2, None) if r is None else (r.lower, r.upper)
                guards.append(Guard("size_range", here, (size, lower, upper), inp.origin))
            else:
                symbols = {"_size": here, **{n: _bound(bound, n, inp) for n in names_in(size)}}
                relations.append(Guard("size_relation", RelationSource(tuple(symbols.items())),
                                       f"_size == {size}", inp.origin))
    return guards + relations + _relation_guards(graph.guards, bound)


def _bound_symbols(graph: Graph, inputs: Sequence[SymbolicInput]) -> dict[str, Source]:
    """Symbol -> the first plain input size that has it."""
    bound: dict[str, Source] = {}
    for inp in inputs:
        for d, size in enumerate(_meta(graph, inp.name).sizes):
            if isinstance(size, str) and size.isidentifier():
                bound.setdefault(size, SizeSource(inp.source, d))
    return bound


def _relation_guards(shape_guards: Sequence[ShapeGuard],
                     bound: Mapping[str, Source]) -> list[Guard]:
    """A ``size_relation`` guard for each of a graph's ``guards`` over the bound symbols
    (one reading an unbacked symbol is checked by the program at run time)."""
    relations = []
    for shape_guard in shape_guards:
        names = names_in(shape_guard.expr)
        if all(n in bound for n in names):
            relations.append(Guard("size_relation", RelationSource(
                tuple((n, bound[n]) for n in names)), shape_guard.expr, shape_guard.source))
    return relations


def install_shape_guards(
    graph: Graph,
    inputs: Sequence[tuple[SymbolicInput, Mapping[int, DynamicDim]]],
    add: Callable[[Guard], None],
    shape_env: object | None = None,
) -> None:
    """Add (through ``add``) the guards of the inputs that were given symbolic
    dimensions (each with the dimensions asked for), after the recorder finished
    ``graph``; log under ``EMBER_LOGS=dynamic`` which dimensions are symbolic, which
    were specialised and why; ``shape_env`` (the recorder's) tells, when it can, which
    source line made a dimension static.

    Raises:
        DynamicDimError: a dimension that had to stay symbolic (``mark_dynamic``,
            ``dynamic_shapes``) was specialised.
    """
    for inp, dims in inputs:
        meta = _meta(graph, inp.name)
        for d, want in sorted(dims.items()):
            size = meta.sizes[d]
            shown = f"{inp.source.expr()}.size({d})"
            if isinstance(size, str):
                r = graph.symbols.get(size)
                upper = "inf)" if r is None or r.upper is None else f"{r.upper}]"
                lower = 2 if r is None else r.lower
                log("dynamic", f"{shown} is symbolic: {size} in [{lower}, {upper} "
                    f"({want.why})")
                continue
            where = _pinned_at(shape_env, inp, d)
            why = ("sizes 0 and 1 always specialise" if int(inp.tensor.size(d)) in (0, 1)
                   else "the program specialised it" + (
                       f" at {where}: {where.text}" if where is not None else ""))
            if want.required:
                raise DynamicDimError(
                    f"{shown} was marked dynamic ({want.why}) but is static ({size}): "
                    f"{why}. Use maybe_mark_dynamic to allow a static size.")
            log("dynamic", f"{shown} stays static ({size}, asked by {want.why}): {why}")
    guards = input_guards(graph, [inp for inp, _ in inputs])
    for g in guards:
        add(g)
    shape = [g for g in guards if g.kind != "tensor"]
    if shape and log_enabled("dynamic"):
        log("dynamic", "shape guards:\n" + "\n".join(f"  {g.describe()}" for g in shape))


def install_stage_guards(
    captured: Graph,
    compiled: Graph,
    inputs: Sequence[tuple[SymbolicInput, Mapping[int, DynamicDim]]],
    add: Callable[[Guard], None],
) -> None:
    """Add (through ``add``) the size relations the stages put on ``compiled`` (the
    compiled program's graph of ``captured``) that ``captured`` does not have: aot's
    backward can specialise a size of 1 (a strided convolution's output length, a
    ``view(-1, 4)`` of one row) that the capture left symbolic. The program checks them
    when it binds its sizes; as guards of the entry, a call that fails one compiles
    again instead of raising ``ShapeError``."""
    known = {g.expr for g in captured.guards}
    later = [g for g in compiled.guards if g.expr not in known]
    if later:
        bound = _bound_symbols(captured, [inp for inp, _ in inputs])
        for guard in _relation_guards(later, bound):
            add(guard)


def _pinned_at(shape_env: object | None, inp: SymbolicInput, dim: int) -> SourceLocation | None:
    # NOTE: an in-place view op of the program (``x.squeeze_()``) changed the fake's
    # shape: its dims are no longer the input's
    if inp.fake is None or inp.fake.dim() != inp.tensor.dim():
        return None
    where = pinning_source(shape_env, inp.fake.size(dim))
    return where if isinstance(where, SourceLocation) else None


def _bound(bound: dict[str, Source], name: str, inp: SymbolicInput) -> Source:
    source = bound.get(name)
    if source is None:
        raise ValueError(f"the sizes of input {inp.source.expr()} read symbol {name!r}, "
                         "which no input dimension binds")
    return source


def _with_origin(guard: Guard, origin: SourceLocation | None) -> Guard:
    return guard if origin is None else Guard(guard.kind, guard.source, guard.expected,
                                              origin)
