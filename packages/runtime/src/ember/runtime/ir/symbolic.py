"""Symbolic sizes: the expression language of the IR's sizes, strides, offsets, symbolic
int arguments (:class:`~ember.runtime.ir.graph.SymExpr`) and guards.

A symbolic size is a Python-syntax string over named symbols: backed symbols ``s0, s1,
...`` are sizes of graph inputs, unbacked ones ``u0, u1, ...`` are sizes a node computes
from data (``aten::nonzero``). Grammar: integer literals, symbol names, ``+ - *``, unary
``-``, ``//`` (floor division), ``%`` (Python modulo, positive divisor), ``Max(a, b,
...)``, ``Min(...)``, parentheses; relations (guards) add ``== != < <= > >=``, ``and``,
``or``, ``not``. Text is checked against a whitelist over Python's ``ast`` (crafted text
never runs code) and read into sympy (symbols are ``sympy.Symbol(name,
integer=True)``; ``a // b`` is ``sympy.floor(a / b)``, ``a % b`` is ``sympy.Mod``).

:func:`format` prints an expression back as canonical text: equal expressions print
equal (``format(parse(t))`` is a fixed point), so IR texts can be compared as strings.

Binding (:class:`SymbolBinder`): a backed symbol takes its value from the first
placeholder (graph order) that has it as a plain size; an unbacked one from the first
node whose result has it as a plain size, when that node runs.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import CodeType
from typing import TYPE_CHECKING

import torch
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.graph import Graph, ScalarMeta, ShapeGuard, SymbolRange, SymInt, TensorMeta
from ember.runtime.ir.symbolic_grammar import SYMBOL_NAME_RE, checked_tree

if TYPE_CHECKING:
    import sympy

# NOTE: sympy (about a second to import) is imported by the functions that read text
# into sympy or print it back (parse, format, canonical, symbol), never by evaluating,
# binding or checking sizes: a compiled program loaded from a cache runs without it.

__all__ = [
    "UNBACKED_FALLBACK_HINT",
    "ShapeError",
    "SymbolBinder",
    "UnbackedSite",
    "UnboundSymbolError",
    "at_hint",
    "canonical",
    "evaluate",
    "format",
    "format_relation",
    "free_symbols",
    "hint_of",
    "holds",
    "is_symbol",
    "parse",
    "parse_relation",
    "relation_symbols",
    "symbol",
]

UNBACKED_FALLBACK_HINT = 8192
"""The value :func:`at_hint` assumes for a symbol without a hint (an unbacked size),
clipped to its range."""


class UnboundSymbolError(KeyError):
    """An expression was evaluated without a value for one of its symbols; ``symbol``
    names it."""

    def __init__(self, symbol_name: str, text: str) -> None:
        super().__init__(symbol_name)
        self.symbol = symbol_name
        self.text = text

    def __str__(self) -> str:
        return f"symbol {self.symbol!r} of {self.text!r} has no value"


def is_symbol(value: SymInt) -> bool:
    """True when ``value`` is a plain symbol name (``"s0"``), not an expression."""
    return isinstance(value, str) and SYMBOL_NAME_RE.fullmatch(value.strip()) is not None


def symbol(name: str) -> sympy.Symbol:
    """The sympy symbol of IR symbol ``name`` (``integer=True``; the same object for the
    same name)."""
    from ember.runtime.ir.symbolic_text import symbol as sympy_symbol

    return sympy_symbol(name)


@functools.lru_cache(maxsize=8192)
def _parse_text(text: str) -> sympy.Expr:
    import sympy
    from ember.runtime.ir.symbolic_text import to_sympy

    tree, _ = checked_tree(text, relation=False)
    value = to_sympy(tree.body)
    assert isinstance(value, sympy.Expr)
    return value


def parse(value: SymInt) -> sympy.Expr:
    """A size (int or expression text) as a sympy expression.

    Raises:
        IRFormatError: for text outside the grammar (names the text).
    """
    if isinstance(value, bool):
        raise IRFormatError(f"size {value!r} is a bool, not an int or an expression")
    if isinstance(value, int):
        import sympy

        return sympy.Integer(value)
    return _parse_text(value)


@functools.lru_cache(maxsize=4096)
def parse_relation(text: str) -> sympy.Basic:
    """A relation (``"s1 == 2*s0"``, ``"s0 > 4 and s0%16 == 0"``) as a sympy boolean.

    Raises:
        IRFormatError: for text outside the grammar (names the text).
    """
    from ember.runtime.ir.symbolic_text import to_sympy

    tree, _ = checked_tree(text, relation=True)
    return to_sympy(tree.body)


def format(expr: sympy.Basic | int) -> SymInt:
    """``expr`` as an int when it is constant, else its canonical text (``2*s0+1``,
    ``s0//2``, ``Max(1, s1)``).

    Raises:
        IRFormatError: for a sympy expression the grammar cannot write (a non-integer
            rational, an unknown function), naming it.
    """
    if isinstance(expr, bool):
        raise IRFormatError(f"{expr!r} is a bool, not a size")
    if isinstance(expr, int):
        return expr
    import sympy
    from ember.runtime.ir.symbolic_text import expr_text

    if isinstance(expr, sympy.Integer):
        return int(expr)
    return expr_text(expr)


def format_relation(rel: sympy.Basic) -> str:
    """Canonical text of a sympy relation (``s0 > 4``, ``s1 == 2*s0``; constants on the
    right, ``and``/``or`` operands sorted).

    Raises:
        IRFormatError: for ``True``/``False`` or a value that is not a relation.
    """
    from ember.runtime.ir.symbolic_text import relation_text

    return relation_text(rel)


def canonical(value: SymInt) -> SymInt:
    """``format(parse(value))``: the canonical form of a size (cached)."""
    return value if isinstance(value, int) else _canonical_text(value)


@functools.lru_cache(maxsize=8192)
def _canonical_text(text: str) -> SymInt:
    return format(_parse_text(text))


def free_symbols(value: SymInt) -> frozenset[str]:
    """The symbol names ``value`` uses (empty for an int).

    Raises:
        IRFormatError: for text outside the grammar.
    """
    if isinstance(value, int):
        return frozenset()
    return checked_tree(value, relation=False)[1]


def relation_symbols(text: str) -> frozenset[str]:
    """The symbol names a relation uses.

    Raises:
        IRFormatError: for text outside the grammar.
    """
    return checked_tree(text, relation=True)[1]


def _max(*args: int) -> int:
    return builtins.max(args)


def _min(*args: int) -> int:
    return builtins.min(args)


_GLOBALS: dict[str, object] = {"__builtins__": {}, "Max": _max, "Min": _min}


@functools.lru_cache(maxsize=8192)
def _code(text: str, relation: bool) -> CodeType:
    tree, _ = checked_tree(text, relation)
    return compile(tree, f"<{'relation' if relation else 'size'} {text!r}>", "eval")


def _run(text: str, relation: bool, env: Mapping[str, object],
         functions: Mapping[str, Callable[..., object]] | None = None) -> object:
    scope = _GLOBALS if functions is None else {**_GLOBALS, **functions}
    try:
        return eval(_code(text, relation), scope, dict(env))
    except NameError as exc:
        raise UnboundSymbolError(exc.name or "?", text) from None


def compute(value: SymInt, env: Mapping[str, object],
            functions: Mapping[str, Callable[..., object]]) -> object:
    """``value`` computed over values of any numeric type (e.g. torch's symbolic ints
    while re-tracing), with ``functions`` standing for ``Max``/``Min``.

    Raises:
        UnboundSymbolError: when ``env`` has no value for a symbol ``value`` uses.
        IRFormatError: for text outside the grammar.
    """
    if isinstance(value, int):
        return value
    return _run(value, False, env, functions)


def evaluate(value: SymInt, env: Mapping[str, int]) -> int:
    """The value of a size for the symbol values ``env`` (each text is checked and
    compiled once; ``//`` and ``%`` are Python's).

    Raises:
        UnboundSymbolError: when ``env`` has no value for a symbol ``value`` uses.
        IRFormatError: for text outside the grammar.
        ZeroDivisionError: for a divisor that is 0 at these values.
    """
    if isinstance(value, int):
        return value
    result = _run(value, False, env)
    assert isinstance(result, int)
    return result


def holds(relation: str, env: Mapping[str, int]) -> bool:
    """Whether ``relation`` is true for the symbol values ``env``.

    Raises:
        UnboundSymbolError: when ``env`` has no value for a symbol the relation uses.
        IRFormatError: for text outside the grammar.
    """
    return bool(_run(relation, True, env))


def hint_of(name: str, r: SymbolRange) -> int:
    """The value :func:`at_hint` uses for symbol ``name``: its hint, or for a symbol
    without one :data:`UNBACKED_FALLBACK_HINT` clipped to its range."""
    if r.hint is not None:
        return r.hint
    value = builtins.max(r.lower, UNBACKED_FALLBACK_HINT)
    return value if r.upper is None else builtins.min(value, r.upper)


def at_hint(value: SymInt, symbols: Mapping[str, SymbolRange]) -> int:
    """``value`` evaluated at the symbols' hints (for heuristics: sizes of saved
    tensors, block sizes; never for correctness).

    Raises:
        UnboundSymbolError: for a symbol missing from ``symbols``.
    """
    if isinstance(value, int):
        return value
    env = {s: hint_of(s, symbols[s]) for s in free_symbols(value) if s in symbols}
    return evaluate(value, env)


# -- binding symbols from inputs ----------------------------------------------------------


class ShapeError(ValueError):
    """Inputs whose sizes a symbolic graph does not accept: the message names the input
    (placeholder), the dim, the symbol, the range or guard, the actual value and the
    guard's source line when known. ``values``: the symbols of the failed range or
    guard with their values (empty for a rank or a static size), so that a caller can
    tell which of its own facts failed (the frontend names the user's ``assert``)."""

    def __init__(self, message: str, values: Mapping[str, int] | None = None) -> None:
        super().__init__(message)
        self.values: dict[str, int] = dict(values or {})


@dataclass(frozen=True)
class UnbackedSite:
    """Where an unbacked symbol is read: dim ``dim`` of result ``index`` (None for a
    node with one result) of node ``node``; ``dim`` is :data:`SCALAR_VALUE` for an
    ``int`` result that is the symbol's value itself (``int(u0)``, ``.item()``)."""

    node: str
    index: int | None
    dim: int


SCALAR_VALUE = -1
""":attr:`UnbackedSite.dim` of a scalar result: :meth:`SymbolBinder.bind_unbacked` is
given ``(value,)`` for it."""


@dataclass(frozen=True)
class _BackedSite:
    position: int  # placeholder position among the graph's placeholders
    name: str  # the placeholder's name
    dim: int

    def __str__(self) -> str:
        return f"input {self.name!r} dim {self.dim}"


class SymbolBinder:
    """Binds a symbolic graph's symbols from concrete inputs and checks every size,
    range and guard; built once per graph, used per call.

    ``backed`` maps each backed symbol to the placeholder dim that binds it,
    ``unbacked`` each unbacked symbol to the node result dim it is read from
    (:meth:`bind_unbacked`).
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.placeholders: list[tuple[str, TensorMeta | None]] = [
            (n.name, n.meta if isinstance(n.meta, TensorMeta) else None)
            for n in graph.placeholders
        ]
        self.backed: dict[str, _BackedSite] = {}
        for position, (name, meta) in enumerate(self.placeholders):
            for dim, size in enumerate(meta.sizes if meta is not None else ()):
                if is_symbol(size):
                    assert isinstance(size, str)
                    self.backed.setdefault(size.strip(), _BackedSite(position, name, dim))
        self.unbacked: dict[str, UnbackedSite] = {}
        for node in graph.nodes:
            if node.op == "placeholder":
                continue
            metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
            for index, result in enumerate(metas):
                if isinstance(result, ScalarMeta) and result.symbol is not None:
                    self.unbacked.setdefault(result.symbol.strip(), UnbackedSite(
                        node.name, index if isinstance(node.meta, tuple) else None,
                        SCALAR_VALUE))
                if not isinstance(result, TensorMeta):
                    continue
                for dim, size in enumerate(result.sizes):
                    if is_symbol(size) and str(size).strip() not in self.backed:
                        where = UnbackedSite(node.name, index if isinstance(node.meta, tuple)
                                             else None, dim)
                        self.unbacked.setdefault(str(size).strip(), where)
        self._guards = [(g, relation_symbols(g.expr)) for g in graph.guards]

    def bind(self, inputs: Sequence[object]) -> dict[str, int]:
        """The value of every backed symbol, read from ``inputs`` (one per placeholder,
        in graph order), after checking every placeholder's sizes, every symbol's range
        and every guard that uses only backed symbols.

        Raises:
            ShapeError: naming the input, dim, symbol, range or guard and the value.
        """
        return self.bind_sizes([
            tuple(int(s) for s in x.shape) if isinstance(x, torch.Tensor) else None
            for x in inputs
        ])

    def bind_sizes(self, sizes: Sequence[Sequence[int] | None]) -> dict[str, int]:
        """:meth:`bind` from plain size tuples (None for an input that is not a tensor).

        Raises:
            ShapeError: as :meth:`bind`.
        """
        if len(sizes) != len(self.placeholders):
            raise ShapeError(f"the graph takes {len(self.placeholders)} inputs, got "
                             f"{len(sizes)}")
        for (name, meta), actual in zip(self.placeholders, sizes):
            if meta is None:
                continue
            if actual is None:
                raise ShapeError(f"input {name!r} must be a tensor with "
                                 f"{meta.ndim} dims")
            if len(actual) != meta.ndim:
                raise ShapeError(f"input {name!r}: expected {meta.ndim} dims "
                                 f"{_sizes_text(meta.sizes)}, got {len(actual)} dims "
                                 f"{tuple(actual)}")
        env: dict[str, int] = {}
        for sym, site in self.backed.items():
            value = sizes[site.position][site.dim]  # type: ignore[index]
            self._check_range(sym, value, str(site))
            env[sym] = value
        for (name, meta), actual in zip(self.placeholders, sizes):
            if meta is not None and actual is not None:
                self._check_sizes(name, meta, actual, env)
        self._check_guards(env, None)
        return env

    def bind_unbacked(self, env: dict[str, int], node: str, index: int | None,
                      sizes: Sequence[int]) -> None:
        """Read the unbacked symbols that result ``index`` of node ``node`` binds from
        its actual ``sizes`` (``(value,)`` for an ``int`` result) into ``env``, check
        their ranges and the guards they complete.

        Raises:
            ShapeError: naming the node, dim, symbol and range or guard.
        """
        new = set()
        for sym, site in self.unbacked.items():
            if site.node == node and site.index == index:
                value = int(sizes[site.dim])
                self._check_range(sym, value, _unbacked_origin(site))
                env[sym] = value
                new.add(sym)
        if new:
            self._check_guards(env, new)

    def check_new_symbol(self, env: Mapping[str, int], sym: str) -> None:
        """:meth:`check_new_symbols` of one symbol."""
        self.check_new_symbols(env, (sym,))

    def check_new_symbols(self, env: Mapping[str, int], syms: Sequence[str]) -> None:
        """Check the ranges of ``syms`` (just bound in ``env`` by a compiled wrapper, from
        one result: ``u0 = buf3.size(0)``, ``u0 = int(buf2)``), then the guards they
        complete: the checks and the messages of :meth:`bind_unbacked`.

        Raises:
            ShapeError: naming the symbol, where it is read, and range or guard.
        """
        for sym in syms:
            site = self.unbacked.get(sym)
            self._check_range(sym, env[sym],
                              f"symbol {sym}" if site is None else _unbacked_origin(site))
        self._check_guards(env, set(syms))

    def _check_range(self, sym: str, value: int, where: str) -> None:
        r = self.graph.symbols.get(sym)
        if r is None:
            return
        if value < r.lower or (r.upper is not None and value > r.upper):
            raise ShapeError(f"{where}: size {value} is outside the range {r} of symbol "
                             f"{sym}", {sym: value})

    def _check_sizes(self, name: str, meta: TensorMeta, actual: Sequence[int],
                     env: Mapping[str, int]) -> None:
        for dim, (expected, value) in enumerate(zip(meta.sizes, actual)):
            if isinstance(expected, int):
                if expected != value:
                    raise ShapeError(f"input {name!r} dim {dim}: size {value}, expected "
                                     f"{expected}")
                continue
            want = evaluate(expected, env)
            if want == value:
                continue
            if is_symbol(expected):
                site = self.backed[expected.strip()]
                raise ShapeError(f"input {name!r} dim {dim}: size {value}, but symbol "
                                 f"{expected} is {want} ({site}); the graph needs them equal")
            used = ", ".join(f"{s}={env[s]}" for s in sorted(free_symbols(expected)))
            raise ShapeError(f"input {name!r} dim {dim}: size {value}, expected {expected} "
                             f"= {want} (with {used})")

    def _check_guards(self, env: Mapping[str, int], new: set[str] | None) -> None:
        for guard, syms in self._guards:
            if not syms <= env.keys() or (new is not None and not syms & new):
                continue
            if not holds(guard.expr, env):
                raise ShapeError(self._guard_message(guard, syms, env),
                                 {s: env[s] for s in syms})

    def _guard_message(self, guard: ShapeGuard, syms: frozenset[str],
                       env: Mapping[str, int]) -> str:
        values = []
        for s in sorted(syms):
            site = self.backed.get(s) or self.unbacked.get(s)
            origin = f" from {site}" if isinstance(site, _BackedSite) else (
                f" from {_unbacked_origin(site)}" if site else "")
            values.append(f"{s}={env[s]}{origin}")
        text = f"guard {guard.expr!r} fails for {', '.join(values)}"
        if guard.source is not None:
            text += f"; it comes from {guard.source}"
            if guard.source.text:
                text += f": {guard.source.text!r}"
        return text


def _unbacked_origin(site: UnbackedSite) -> str:
    """Where an unbacked symbol's value is read, as messages name it."""
    dim = "" if site.dim == SCALAR_VALUE else f" dim {site.dim}"
    return f"the result of {site.node!r}{dim}"


def _sizes_text(sizes: Sequence[SymInt]) -> str:
    return "[" + ", ".join(str(s) for s in sizes) + "]"
