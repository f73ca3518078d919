"""Index arithmetic over symbolic sizes, done with sympy.

The static simplifications of :mod:`.index` work on int coefficients and bounds. When a
divisor is symbolic (``x // s1``: a flattened ``[s0, s1]`` read back per row) or a bound
involves a symbol, the facts are proved with sympy instead: a coefficient is a multiple
of the divisor when their quotient is an integer polynomial, and ``0 <= rest < d`` holds
when ``d - 1 - upper_bound(rest)`` is provably non-negative for every size at least 1
(every symbolic dimension is at least 1 where a loop over it runs at all). Nothing here is
decided at a hint: a fact that is not proved keeps the division in the index.

Size symbols are ``sympy.Symbol(name, integer=True)`` (the IR's symbols, see
``ember.runtime.ir.symbolic``); a size prints as its text over the kernel's size
arguments, which are named after the symbols (:func:`size_text`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from types import MappingProxyType

import sympy
from ember.inductor.loop_ir.index import (
    SYMBOLIC_DIVISION,
    Add,
    FloorDiv,
    IndexExpr,
    Indirect,
    Int,
    Mod,
    Mul,
    Size,
    Sym,
    Var,
    add,
    as_index,
    mul,
)
from ember.inductor.loop_ir.size_text import provably_nonnegative, signed_symbols, size_text
from ember.runtime.ir import SymbolRange, symbolic


def size_symbol(name: str) -> sympy.Symbol:
    """The sympy symbol of IR size symbol ``name`` (the runtime's, ``symbolic.symbol``)."""
    return symbolic.symbol(name)


def symbolic_upper_bound(x: IndexExpr) -> sympy.Expr | None:
    """The largest value ``x`` can take as a sympy expression, or None (indirect)."""
    if isinstance(x, Var):
        return sympy.sympify(x.size) - 1
    if isinstance(x, Int):
        return sympy.Integer(x.value)
    if isinstance(x, Sym):
        return x.expr
    if isinstance(x, Add):
        bounds = [symbolic_upper_bound(t) for t in x.terms]
        return None if any(b is None for b in bounds) else sympy.Add(*bounds)
    if isinstance(x, Mul):
        bounds = [symbolic_upper_bound(f) for f in x.factors]
        if any(b is None or not provably_nonnegative(b) for b in bounds):
            return None
        return sympy.Mul(*bounds)
    if isinstance(x, (FloorDiv, Mod)):
        d = x.divisor.expr if isinstance(x.divisor, Sym) else sympy.Integer(x.divisor)
        if isinstance(x, Mod):
            return d - 1
        b = symbolic_upper_bound(x.expr)
        return None if b is None else sympy.floor(b / d)
    assert isinstance(x, Indirect)
    return None


def _split_term(term: IndexExpr) -> tuple[sympy.Expr, list[IndexExpr]]:
    """``term`` as (its constant and symbolic coefficient, its other factors)."""
    if isinstance(term, Int):
        return sympy.Integer(term.value), []
    if isinstance(term, Sym):
        return term.expr, []
    factors = list(term.factors) if isinstance(term, Mul) else [term]
    coef: sympy.Expr = sympy.Integer(1)
    rest: list[IndexExpr] = []
    for f in factors:
        if isinstance(f, Int):
            coef = coef * f.value
        elif isinstance(f, Sym):
            coef = coef * f.expr
        else:
            rest.append(f)
    return coef, rest


def _quotient(coef: sympy.Expr, d: sympy.Expr) -> sympy.Expr | None:
    """``coef / d`` when it is an integer polynomial in the symbols, else None."""
    q = sympy.cancel(coef / d)
    if q == 0:
        return None
    numer, denom = sympy.fraction(q)
    if denom != 1 or not q.is_polynomial():
        return None
    poly = sympy.Poly(q, *sorted(q.free_symbols, key=str)) if q.free_symbols else None
    if poly is not None and not all(c.is_Integer for c in poly.coeffs()):
        return None
    return sympy.expand(numer)


def divides(d: sympy.Expr | int, n: sympy.Expr | int) -> bool:
    """Whether ``d`` divides ``n`` for every value of their symbols (``n / d`` is an
    integer polynomial)."""
    return _quotient(sympy.sympify(n), sympy.sympify(d)) is not None


def as_size(e: sympy.Expr | int) -> Size:
    """``e`` as a loop-IR size: an int when constant, else the expanded expression."""
    if isinstance(e, int):
        return e
    e = sympy.expand(e)
    return int(e) if e.is_Integer else e


def _nonneg_index(x: IndexExpr) -> bool:
    b = symbolic_lower_bound(x)
    return b is not None and provably_nonnegative(b)


def symbolic_lower_bound(x: IndexExpr) -> sympy.Expr | None:
    """The smallest value ``x`` can take as a sympy expression, or None (unknown)."""
    if isinstance(x, (Var, Mod, FloorDiv)):
        return sympy.Integer(0)
    if isinstance(x, Int):
        return sympy.Integer(x.value)
    if isinstance(x, Sym):
        return x.expr
    if isinstance(x, Add):
        bounds = [symbolic_lower_bound(t) for t in x.terms]
        return None if any(b is None for b in bounds) else sympy.Add(*bounds)
    if isinstance(x, Mul):
        coef, rest = _split_term(x)
        if provably_nonnegative(coef) and all(_nonneg_index(f) for f in rest):
            return sympy.Integer(0)
        return None
    return None


def _divide(x: IndexExpr, d: sympy.Expr
            ) -> tuple[list[IndexExpr], list[IndexExpr]]:
    """The terms of ``x`` divided by ``d`` (those whose coefficient ``d`` divides), and
    the other terms."""
    terms = list(x.terms) if isinstance(x, Add) else [x]
    divided: list[IndexExpr] = []
    rest: list[IndexExpr] = []
    for t in terms:
        coef, factors = _split_term(t)
        q = _quotient(coef, d)
        if q is None:
            rest.append(t)
        else:
            divided.append(mul(*factors, q) if factors else as_index(q))
    return divided, rest


def symbolic_floordiv(x: IndexExpr, d: sympy.Expr) -> IndexExpr:
    """``x // d`` for non-negative ``x`` and a positive symbolic ``d``, simplified:
    ``(a*d + b) // d`` is ``a`` when ``0 <= b < d`` is proved."""
    if isinstance(x, (Int, Sym)):
        e = x.expr if isinstance(x, Sym) else sympy.Integer(x.value)
        return as_index(sympy.floor(e / d))
    if isinstance(x, FloorDiv):
        inner = x.divisor.expr if isinstance(x.divisor, Sym) else sympy.Integer(x.divisor)
        return symbolic_floordiv(x.expr, inner * d)
    divided, rest = _divide(x, d)
    rest_expr = add(*rest)
    rest_ok = all(_nonneg_index(t) for t in rest)
    bound = symbolic_upper_bound(rest_expr)
    if divided and rest_ok and bound is not None and provably_nonnegative(d - 1 - bound):
        return add(*divided)
    if divided and rest_ok:
        return add(*divided, FloorDiv(rest_expr, Sym(d)))
    split = _split_by_factor(x, d)
    if split is not None:  # x == c*A + r, 0 <= r < c, c | d: x // d == A // (d/c)
        big, c, _ = split
        return symbolic_floordiv(big, sympy.cancel(d / c))
    return FloorDiv(x, Sym(d))


def _split_by_factor(x: IndexExpr, d: sympy.Expr
                     ) -> tuple[IndexExpr, sympy.Expr, IndexExpr] | None:
    """``(A, c, r)`` with ``x == c*A + r``, ``0 <= r < c`` and ``c`` dividing ``d``
    (proved), or None: the symbolic form of the static ``_split_by_factor``
    (``(x0*512 + x1) // (512*s1)`` with ``x1 < 512`` is ``x0 // s1``)."""
    terms = list(x.terms) if isinstance(x, Add) else [x]
    if not all(_nonneg_index(t) for t in terms):
        return None
    coefficients = {_split_term(t)[0] for t in terms}
    for c in sorted(coefficients, key=str):
        if c == 1 or not provably_nonnegative(c - 2) or _quotient(d, c) is None:
            continue
        big, rest = _divide(x, c)
        bound = symbolic_upper_bound(add(*rest))
        if big and bound is not None and provably_nonnegative(c - 1 - bound):
            return add(*big), c, add(*rest)
    return None


def symbolic_mod(x: IndexExpr, d: sympy.Expr) -> IndexExpr:
    """``x % d`` for non-negative ``x`` and a positive symbolic ``d``, simplified."""
    if isinstance(x, (Int, Sym)):
        e = x.expr if isinstance(x, Sym) else sympy.Integer(x.value)
        return as_index(sympy.Mod(e, d))
    _, rest = _divide(x, d)
    rest_expr = add(*rest)
    if not all(_nonneg_index(t) for t in rest):
        return Mod(x, Sym(d))
    bound = symbolic_upper_bound(rest_expr)
    if bound is not None and provably_nonnegative(d - 1 - bound):
        return rest_expr
    split = _split_by_factor(rest_expr, d)
    if split is not None:  # c*A + r with r < c, c | d: (c*A + r) % d == c*(A % (d/c)) + r
        big, c, small = split
        return add(mul(symbolic_mod(big, sympy.cancel(d / c)), c), small)
    return Mod(rest_expr, Sym(d))


# -- sizes from the IR, and hints for heuristics ----------------------------------------
_HINTS: contextvars.ContextVar[Mapping[str, int]] = contextvars.ContextVar(
    "ember_inductor_size_hints", default=MappingProxyType({}))

_RANGES: contextvars.ContextVar[Mapping[str, SymbolRange]] = contextvars.ContextVar(
    "ember_inductor_symbol_ranges", default=MappingProxyType({}))

#: the value a heuristic assumes for a symbol without a hint (an unbacked size)
UNKNOWN_HINT = 8192


def from_ir(value: int | str | sympy.Expr) -> Size:
    """An IR size (an int, or size-expression text; a loop-IR size passes through) as a
    loop-IR size: an int when constant, else a sympy expression over
    :func:`size_symbol` symbols."""
    if isinstance(value, int):
        return value
    if isinstance(value, sympy.Basic):  # a meta a lowering pass rebuilt from loop-IR sizes
        return as_size(value)
    # NOTE: expanded, so that equal sizes compare equal (the scheduler fuses ranges by
    # ==: (s0 + 1)*s1 and s0*s1 + s1 are one range)
    return as_size(symbolic.parse(value))


def same_size(a: Size, b: Size) -> bool:
    """Whether two sizes are equal for every value of their symbols (``(s0 + 1)*s1``
    and ``s0*s1 + s1`` are)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return bool(sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0)


def is_static(size: Size) -> bool:
    """Whether ``size`` is a plain int."""
    return isinstance(size, int)


@contextlib.contextmanager
def size_hints(hints: Mapping[str, int],
               ranges: Mapping[str, SymbolRange] | None = None) -> Iterator[None]:
    """Within the block, :func:`hint` evaluates symbols at ``hints`` (a graph's
    ``symbols[name].hint`` values: what the lowering, scheduler and codegens compile)
    and :func:`symbol_ranges` returns ``ranges`` (the graph's symbol table: a codegen
    choice that must hold for every size, such as a whole row in one block, reads the
    upper bounds)."""
    token = _HINTS.set(dict(hints))
    ranges_token = _RANGES.set(dict(ranges or {}))
    signed = frozenset(name for name, r in (ranges or {}).items() if r.lower < 0)
    try:
        with signed_symbols(signed):  # k.item(): proofs of ">= 0" do not hold for it
            yield
    finally:
        _RANGES.reset(ranges_token)
        _HINTS.reset(token)


def symbol_ranges() -> Mapping[str, SymbolRange]:
    """The ranges of the symbols of the graph being compiled (:func:`size_hints`)."""
    return _RANGES.get()


def hint(size: Size) -> int:
    """``size`` at the current hints (:func:`size_hints`): for heuristics only (block
    sizes, loop forms, what to store), never for correctness. A symbolic size is at
    least 1 here (``120 // u0`` floors to 0 at a large guessed hint; a block of 0
    elements is no block)."""
    if isinstance(size, int):
        return size
    hints = _HINTS.get()
    env = {s: hints.get(s.name, UNKNOWN_HINT) for s in size.free_symbols}
    return max(1, int(size.xreplace(env)))


# -- sizes that may be 0: unbacked symbols ---------------------------------------------
# The loop IR addresses a tensor only where it has an element, so every size of it is at
# least 1 there (the proofs above assume it). Torch's strides of a dense layout count a
# size n as Max(1, n) (a [2, 0] tensor is (1, 1), not (0, 1)), which only shows when n
# is 0: the loop IR reads such a stride as n (:func:`stride_from_ir`), and the wrapper,
# where a layout becomes a tensor the caller may see, writes Max(1, n) back
# (:func:`zero_safe_strides`).


def stride_from_ir(value: int | str | sympy.Expr) -> Size:
    """An IR stride as a loop-IR size (:func:`from_ir`), each ``Max(1, n)`` read as
    ``n``: equal wherever the tensor has an element."""
    size = from_ir(value)
    if isinstance(size, int) or not size.has(sympy.Max):
        return size
    return as_size(size.replace(
        lambda e: isinstance(e, sympy.Max) and len(e.args) == 2 and sympy.Integer(1) in e.args,
        lambda e: next(a for a in e.args if a != 1)))


def may_be_below_one(size: Size) -> bool:
    """Whether ``size`` may be 0 (or negative) for some value in its symbols' ranges
    (:func:`symbol_ranges`; a symbol without one may be 0)."""
    if isinstance(size, int):
        return size < 1
    ranges = _RANGES.get()
    shifted: dict[sympy.Basic, sympy.Expr] = {}
    for s in size.free_symbols:
        r = ranges.get(getattr(s, "name", ""))
        if r is None or r.lower < 1:
            return True
        shifted[s] = r.lower + sympy.Dummy(f"{s}_over", integer=True, nonnegative=True)
    return not bool(sympy.expand(size.xreplace(shifted) - 1).is_nonnegative)


def zero_safe_strides(sizes: tuple[Size, ...], strides: tuple[Size, ...]) -> tuple[Size, ...]:
    """``strides`` as torch lays out a dense tensor of ``sizes`` when a size that may be
    0 is: each stride over such a size (walking the dims from the innermost out) is the
    product of the sizes inside it, each ``Max(1, n)``. The same values wherever the
    tensor has an element; ``strides`` unchanged when no size may be 0 or the layout is
    not dense (a view with gaps: its strides are its base's)."""
    small = {s for size in sizes if not isinstance(size, int) and may_be_below_one(size)
             for s in size.free_symbols}
    if not small:
        return strides
    order = sorted(range(len(sizes)), key=lambda d: (hint(strides[d]), -d))
    expected: Size = 1
    for d in order:
        if sizes[d] != 1 and not same_size(strides[d], expected):
            return strides
        expected = as_size(expected * sizes[d])
    result = list(strides)
    inside: sympy.Expr = sympy.Integer(1)
    for d in order:
        stride = strides[d]
        if not isinstance(stride, int) and stride.free_symbols & small:
            result[d] = as_size(inside)
        size = sympy.sympify(sizes[d])
        inside = inside * (sympy.Max(1, size) if may_be_below_one(sizes[d]) else size)
    return tuple(result)


# floordiv/mod of .index hand symbolic divisors to this module (it imports .index)
SYMBOLIC_DIVISION.update(floordiv=symbolic_floordiv, mod=symbolic_mod)

__all__ = [
    "UNKNOWN_HINT",
    "as_size",
    "divides",
    "from_ir",
    "hint",
    "is_static",
    "may_be_below_one",
    "provably_nonnegative",
    "same_size",
    "size_hints",
    "size_symbol",
    "size_text",
    "stride_from_ir",
    "symbol_ranges",
    "symbolic_floordiv",
    "symbolic_lower_bound",
    "symbolic_mod",
    "symbolic_upper_bound",
    "zero_safe_strides",
]
