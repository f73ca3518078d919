"""Size arithmetic for the aot passes: sizes, strides and offsets are
:data:`~ember.runtime.ir.SymInt` (an int, or canonical expression text over the graph's
symbols, :mod:`ember.runtime.ir.symbolic`); a symbolic int *argument* of a node is a
:class:`~ember.runtime.ir.graph.SymExpr`.

Static values stay plain ints everywhere, so a static program is built exactly as it
was before symbolic shapes existed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import sympy
import torch
from ember.aot._torch import narrow_unbacked
from ember.runtime.ir import (
    Argument,
    Graph,
    Node,
    ScalarMeta,
    SymbolRange,
    SymInt,
    TensorMeta,
    symbolic,
)
from ember.runtime.ir.graph import SymExpr


def is_static_meta(meta: TensorMeta) -> bool:
    """True when the sizes, strides and storage offset of ``meta`` are all ints."""
    return all(isinstance(v, int) for v in (*meta.sizes, *meta.strides, meta.storage_offset))


def graph_is_symbolic(graph: Graph) -> bool:
    """True when ``graph`` declares symbols or a placeholder has a symbolic layout."""
    return bool(graph.symbols) or any(
        isinstance(p.meta, TensorMeta) and not is_static_meta(p.meta)
        for p in graph.placeholders)


def as_argument(value: SymInt) -> int | SymExpr:
    """A size as a node argument: an int stays an int, text becomes ``SymExpr``."""
    if isinstance(value, int):
        return value
    canonical = symbolic.format(symbolic.parse(value))
    return canonical if isinstance(canonical, int) else SymExpr(canonical)


def sizes_argument(values: Iterable[SymInt]) -> tuple[int | SymExpr, ...]:
    """A list of sizes (``view``'s ``size``, ``as_strided``'s ``stride``) as an argument."""
    return tuple(as_argument(v) for v in values)


def from_argument(value: Argument) -> SymInt:
    """The size a node argument stands for (``SymExpr`` → its text)."""
    if isinstance(value, SymExpr):
        return value.expr
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(f"{value!r} is not a size argument")


def _combine(values: Iterable[SymInt], op: Callable[[sympy.Expr, sympy.Expr], sympy.Expr],
             start: int) -> SymInt:
    items = list(values)
    if all(isinstance(v, int) for v in items):
        result = start
        for v in items:
            assert isinstance(v, int)
            result = int(op(sympy.Integer(result), sympy.Integer(v)))
        return result
    expr: sympy.Expr = sympy.Integer(start)
    for v in items:
        expr = op(expr, symbolic.parse(v))
    return symbolic.format(expr)


def product(values: Iterable[SymInt]) -> SymInt:
    """The product of sizes (an int when all are ints)."""
    return _combine(values, lambda a, b: a * b, 1)


def total(values: Iterable[SymInt]) -> SymInt:
    """The sum of sizes (an int when all are ints)."""
    return _combine(values, lambda a, b: a + b, 0)


def difference(a: SymInt, b: SymInt) -> SymInt:
    """``a - b`` (an int when both are ints)."""
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    return symbolic.format(symbolic.parse(a) - symbolic.parse(b))


def numel(meta: TensorMeta) -> SymInt:
    """The number of elements of ``meta``, symbolic when a size is."""
    return product(meta.sizes)


def nbytes(meta: TensorMeta) -> SymInt:
    """The bytes of ``meta``'s elements, symbolic when a size is."""
    return product((*meta.sizes, meta.dtype.itemsize))


def contiguous_strides(sizes: tuple[SymInt, ...]) -> tuple[SymInt, ...]:
    """Row-major strides of ``sizes``; a size 0 or 1 counts as 1, as torch does (symbols
    are at least 2, so a symbolic size is its own factor)."""
    strides: list[SymInt] = []
    step: SymInt = 1
    for size in reversed(sizes):
        strides.append(step)
        step = product((step, size if not isinstance(size, int) else max(size, 1)))
    return tuple(reversed(strides))


def is_contiguous(meta: TensorMeta) -> bool:
    """True when ``meta`` is row-major dense (dims of size 1 may have any stride).
    Symbolic strides are compared as canonical expressions: one that equals its
    row-major value only under a guard counts as not contiguous (the caller then makes
    a contiguous copy: right, if slower)."""
    expected = contiguous_strides(meta.sizes)
    for size, stride, want in zip(meta.sizes, meta.strides, expected):
        if size == 1:
            continue
        if symbolic.canonical(stride) != symbolic.canonical(want):
            return False
    return True


def hint(value: SymInt, symbols: Mapping[str, SymbolRange]) -> int:
    """``value`` at the symbols' hints (heuristics only, never correctness)."""
    return symbolic.at_hint(value, symbols)


def same(a: SymInt, b: SymInt) -> bool:
    """Whether two sizes are the same expression (canonical text compared)."""
    return symbolic.canonical(a) == symbolic.canonical(b)


def same_sizes(a: Iterable[SymInt], b: Iterable[SymInt]) -> bool:
    """Whether two size lists are the same expressions, dim by dim."""
    la, lb = list(a), list(b)
    return len(la) == len(lb) and all(same(x, y) for x, y in zip(la, lb))


# ---- evaluating expressions on torch's symbolic ints --------------------------------

SymbolValues = Mapping[str, Any]
"""IR symbol name -> its value while re-tracing: a ``torch.SymInt`` (or an int)."""


def _sym_max(*args: Any) -> Any:
    return functools.reduce(torch.sym_max, args)


def _sym_min(*args: Any) -> Any:
    return functools.reduce(torch.sym_min, args)


_FUNCTIONS: dict[str, Callable[..., Any]] = {"Max": _sym_max, "Min": _sym_min}


class UnboundSizeSymbolError(KeyError):
    """A size expression names a symbol that no value re-traced so far binds."""

    def __str__(self) -> str:
        return str(self.args[0])


def evaluate_symbolic(value: SymInt, values: SymbolValues) -> Any:
    """``value`` computed with torch's symbolic ints (``values``), so the result is a
    ``torch.SymInt`` that the fake tensors' shape environment tracks (``Max``/``Min``
    are ``torch.sym_max``/``sym_min``: no guard is added).

    Raises:
        UnboundSizeSymbolError: a symbol of ``value`` has no entry in ``values``.
        IRFormatError: text outside the size grammar.
    """
    try:
        return symbolic.compute(value, values, _FUNCTIONS)
    except symbolic.UnboundSymbolError as exc:
        raise UnboundSizeSymbolError(
            f"size {value!r} uses symbol {exc.symbol!r}, which no input or earlier value "
            "of the graph has as a plain size") from None


def bind_plain_sizes(meta: object, value: Any, values: dict[str, Any]) -> None:
    """Record in ``values`` each symbol that ``meta`` (a node's IR metadata) has as a
    plain size, taking its value from the re-traced ``value`` (a fake tensor, or a tuple
    of them): the binding rule of :class:`ember.runtime.ir.symbolic.SymbolBinder`."""
    if isinstance(meta, tuple):
        if isinstance(value, (tuple, list)):
            for m, v in zip(meta, value):
                bind_plain_sizes(m, v, values)
        return
    if isinstance(meta, ScalarMeta) and meta.symbol is not None:  # int(u0): .item()
        values.setdefault(meta.symbol.strip(), value)
        return
    if not isinstance(meta, TensorMeta) or not isinstance(value, torch.Tensor):
        return
    for d, size in enumerate(meta.sizes):
        if isinstance(size, str) and symbolic.is_symbol(size) and size.strip() not in values:
            values[size.strip()] = value.shape[d]


def narrow_unbacked_symbols(meta: object, values: Mapping[str, Any],
                            symbols: Mapping[str, SymbolRange], known: set[str]) -> None:
    """Give each data-dependent symbol of ``symbols`` (no hint) that ``meta`` binds, and
    ``known`` does not hold yet, its range on the re-traced torch symbol ``values`` has
    for it (``u0 in [2, 6]`` after ``torch._check``, a count at most the numel): torch
    makes that symbol afresh, knowing nothing, and later stages could prove nothing
    (``.item()`` non-negative, a slice of ``u0`` rows no longer ``Min(s0, u0)``)."""
    for name in _bound_names(meta):
        r = symbols.get(name)
        if name in known or name not in values or r is None or r.hint is not None:
            continue
        known.add(name)
        narrow_unbacked(values[name], r.lower, r.upper)


def _bound_names(meta: object) -> set[str]:
    if isinstance(meta, tuple):
        return {n for m in meta for n in _bound_names(m)}
    if isinstance(meta, ScalarMeta) and meta.symbol is not None:
        return {meta.symbol.strip()}
    if isinstance(meta, TensorMeta):
        return {str(s).strip() for s in meta.sizes if symbolic.is_symbol(s)}
    return set()


def meta_symbols(meta: object) -> set[str]:
    """The symbols a node's metadata uses (sizes, strides, offsets)."""
    if isinstance(meta, tuple):
        return {s for m in meta for s in meta_symbols(m)}
    if not isinstance(meta, TensorMeta):
        return set()
    found: set[str] = set()
    for v in (*meta.sizes, *meta.strides, meta.storage_offset):
        found |= symbolic.free_symbols(v)
    return found


def argument_symbols(value: Argument) -> set[str]:
    """The symbols the ``SymExpr`` values inside an argument use."""
    if isinstance(value, SymExpr):
        return set(symbolic.free_symbols(value.expr))
    if isinstance(value, tuple):
        return {s for v in value for s in argument_symbols(v)}
    return set()


def node_symbols(node: Node) -> set[str]:
    """The symbols one node uses: its metadata and its ``SymExpr`` arguments."""
    found = meta_symbols(node.meta)
    for a in (*node.args, *node.kwargs.values()):
        found |= argument_symbols(a)
    return found


def graph_symbols(graph: Graph) -> set[str]:
    """Every symbol the nodes and guards of ``graph`` use."""
    found: set[str] = set()
    for node in graph.nodes:
        found |= node_symbols(node)
    for guard in graph.guards:
        found |= symbolic.relation_symbols(guard.expr)
    return found


def placeholder_bound_symbols(graph: Graph) -> set[str]:
    """The symbols some placeholder of ``graph`` has as a plain size (they are bound
    when the graph is called)."""
    return {s.strip() for p in graph.placeholders if isinstance(p.meta, TensorMeta)
            for s in p.meta.sizes if isinstance(s, str) and symbolic.is_symbol(s)}
