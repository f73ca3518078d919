"""The verifier's rules for symbolic shapes (part of :func:`ember.runtime.ir.verify`).

- each entry of ``graph.symbols`` is a symbol name with a non-empty range and, when it
  has a hint, a hint inside the range;
- every size, stride and offset expression, every ``SymExpr`` argument and every guard
  is in the grammar of :mod:`ember.runtime.ir.symbolic` and uses only symbols of
  ``graph.symbols``;
- every symbol used is *bound* (the binding rule of :class:`~ember.runtime.ir.symbolic.
  SymbolBinder`): a backed symbol by a placeholder that has it as a plain size, an
  unbacked one by a node result that has it as a plain size, or by an ``int`` result
  that names it (``int(u0)``, ``.item()``), before any later node uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ember.runtime.ir import symbolic
from ember.runtime.ir.errors import IRFormatError, VerificationError
from ember.runtime.ir.graph import (
    Argument,
    Graph,
    Meta,
    Node,
    ScalarMeta,
    SymExpr,
    SymInt,
    TensorMeta,
)

Fail = Callable[[Node | None, str], VerificationError]


class SymbolRules:
    """Checks one graph's symbols; :meth:`check_node` is called for each node in graph
    order, then :meth:`check_guards`."""

    def __init__(self, graph: Graph, fail: Fail) -> None:
        self.graph = graph
        self.fail = fail
        # Backed symbols: bound by any placeholder before the first node runs.
        self.bound: set[str] = set()
        for node in graph.placeholders:
            self.bound.update(_plain_symbols(node.meta))

    def check_table(self) -> None:
        for name, r in self.graph.symbols.items():
            if not symbolic.is_symbol(name) or name != name.strip():
                raise self.fail(None, f"symbol name {name!r} is not an identifier")
            if r.upper is not None and r.upper < r.lower:
                raise self.fail(None, f"symbol {name!r} has an empty range {r}")
            if r.hint is not None and (r.hint < r.lower
                                       or (r.upper is not None and r.hint > r.upper)):
                raise self.fail(None, f"symbol {name!r} has hint {r.hint} outside its "
                                      f"range {r}")

    def check_node(self, node: Node) -> None:
        for arg in _sym_arguments(node.args, node.kwargs.values()):
            self._check_uses(node, f"symbolic argument {arg}", arg.expr,
                             self._symbols_of(node, arg.expr, "symbolic argument"))
        if node.op != "placeholder":
            self.bound.update(_plain_symbols(node.meta))
        for expr in _meta_expressions(node.meta):
            self._check_uses(node, f"size expression {expr!r}", expr,
                             self._symbols_of(node, expr, "size expression"))

    def check_guards(self) -> None:
        for guard in self.graph.guards:
            try:
                used = symbolic.relation_symbols(guard.expr)
            except IRFormatError as e:
                raise self.fail(None, f"guard {guard.expr!r}: {e}") from None
            self._check_uses(None, f"guard {guard.expr!r}", guard.expr, used)

    def _symbols_of(self, node: Node, expr: str, what: str) -> frozenset[str]:
        try:
            return symbolic.free_symbols(expr)
        except IRFormatError as e:
            raise self.fail(node, f"{what} {expr!r} is not in the size grammar: {e}") from None

    def _check_uses(self, node: Node | None, what: str, expr: str,
                    used: Iterable[str]) -> None:
        for name in sorted(used):
            if name not in self.graph.symbols:
                raise self.fail(node, f"{what} uses symbol {name!r}, which is not in "
                                      "graph.symbols")
            if name not in self.bound:
                raise self.fail(node, f"{what} uses symbol {name!r}, which no placeholder "
                                      "(nor earlier node result) has as a plain size: "
                                      "nothing binds it")


def _single_metas(meta: Meta) -> Iterable[TensorMeta]:
    for m in meta if isinstance(meta, tuple) else (meta,):
        if isinstance(m, TensorMeta):
            yield m


def _plain_symbols(meta: Meta) -> set[str]:
    found = {str(s).strip() for m in _single_metas(meta) for s in m.sizes
             if symbolic.is_symbol(s)}
    for m in meta if isinstance(meta, tuple) else (meta,):
        if isinstance(m, ScalarMeta) and m.symbol is not None:  # int(u0): .item()
            found.add(m.symbol.strip())
    return found


def _meta_expressions(meta: Meta) -> Iterable[str]:
    for m in _single_metas(meta):
        values: tuple[SymInt, ...] = (*m.sizes, *m.strides, m.storage_offset)
        for v in values:
            if isinstance(v, str):
                yield v


def _sym_arguments(*groups: Iterable[Argument]) -> Iterable[SymExpr]:
    for group in groups:
        for a in group:
            if isinstance(a, SymExpr):
                yield a
            elif isinstance(a, tuple):
                yield from _sym_arguments(a)
