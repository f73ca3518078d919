"""One form per relation: the guards a dynamic recording keeps (part of
:meth:`ember.runtime.tracing_symbolic.RecordedSymbols.finish`). Pure sympy over IR symbols.

Torch states one fact several ways (a ``view`` of ``[s0, s1]`` as ``[s0, s1//2, 2]`` adds
``s0*s1 == 2*s0*(s1//2)``, ``s1%(s1//2) == 0`` and ``s1//(s1//2) == 2``: all three say
``s1`` is even). :func:`one_form_per_relation` keeps one canonical guard per relation and
drops those implied by the kept ones and by the symbols' ranges, with these sound rules:

============================  ================================================================
rule                          effect
============================  ================================================================
floor of a constant divisor   ``a//k`` is rewritten ``(a - a%k)/k`` inside ``==``/``!=``, so
                              ``s0*s1 - 2*s0*(s1//2)`` becomes ``s0*(s1%2)``
positive factor               ``p*e == 0`` (``!=``) is ``e == 0`` (``!=``) when ``p`` is a nonzero
                              constant or a product of symbols whose range starts at >= 1
divisibility                  a kept ``a%k == 0`` (``a`` a product of positive symbols, ``k`` an
                              int) substitutes ``a = k*q`` into the other guards; one that
                              becomes True is dropped (``s1%(s1//2) == 0`` given ``s1%2 == 0``)
ranges                        a guard true for every value of positive symbols is dropped
                              (``s0//2 <= s0``)
same text                     the first guard of a canonical text keeps its source line
============================  ================================================================
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sympy
from ember.runtime.ir import ShapeGuard, SourceLocation, SymbolRange, symbolic
from ember.runtime.ir.errors import IRFormatError

__all__ = ["canonical_relation", "implied_by_ranges", "one_form_per_relation"]

Relation = tuple[sympy.Basic, SourceLocation | None]
_Fact = tuple[sympy.Expr, int]  # a % k == 0


def one_form_per_relation(relations: Sequence[Relation],
                          ranges: Mapping[str, SymbolRange]) -> list[ShapeGuard]:
    """The guards of ``relations`` (IR sympy) in canonical form, in order, without the
    duplicates, the ones implied by ``ranges`` and the ones implied by other kept
    guards (module docstring: the rules)."""
    kept: list[tuple[sympy.Basic, str, SourceLocation | None]] = []
    seen: set[str] = set()
    for relation, source in relations:
        if relation is sympy.true:
            continue
        form = canonical_relation(_exact_quotients_cancelled(relation), ranges)
        if form is sympy.true or implied_by_ranges(form, ranges):
            continue
        text = symbolic.format_relation(form)
        if text not in seen:
            seen.add(text)
            kept.append((form, text, source))
    # divisibility facts first, one at a time (so two facts never drop each other), then
    # every other guard against the facts left
    for entry in [k for k in kept if _fact(k[0], ranges) is not None]:
        others = [f for k in kept if k is not entry
                  for f in [_fact(k[0], ranges)] if f is not None]
        if _implied_by_facts(entry[0], others, ranges):
            kept.remove(entry)
    facts = [f for k in kept for f in [_fact(k[0], ranges)] if f is not None]
    return [ShapeGuard(text, source) for form, text, source in kept
            if _fact(form, ranges) is not None
            or not _implied_by_facts(form, facts, ranges)]


def canonical_relation(relation: sympy.Basic,
                       ranges: Mapping[str, SymbolRange]) -> sympy.Basic:
    """``relation`` as ``a%k == 0`` (or ``!= 0``) when it states a divisibility in
    another form (``s0*s1 == 2*s0*(s1//2)``, ``s0*(s1%16) == 0``); else unchanged."""
    if not isinstance(relation, (sympy.Eq, sympy.Ne)):
        return relation
    lhs, rhs = relation.args
    difference = sympy.expand(_floor_to_mod(lhs - rhs))
    rest = _without_positive_factors(difference, ranges)
    if isinstance(rest, sympy.Mod) and all(n.is_Integer for n in rest.atoms(sympy.Number)):
        candidate = relation.func(rest, 0)
        try:
            symbolic.format_relation(candidate)
        except IRFormatError:
            # NOTE: the remainder form of a floor over a non-constant expression (a
            # strided convolution's output size) can divide by a symbol, which the
            # grammar cannot write: the relation then stays as torch stated it
            return relation
        return candidate
    return relation


def implied_by_ranges(relation: sympy.Basic, ranges: Mapping[str, SymbolRange]) -> bool:
    """Whether ``relation`` holds for every positive value of its symbols when all of
    them are positive (lower bound >= 1): sympy decides ``s0//2 <= s0`` that way."""
    free = relation.free_symbols
    if not free or any(ranges.get(str(s), SymbolRange(0)).lower < 1 for s in free):
        return False
    positive = {s: sympy.Symbol(str(s), integer=True, positive=True) for s in free}
    compare = _COMPARISONS.get(type(relation))
    if compare is None:
        return relation.xreplace(positive) is sympy.true
    lhs, rhs = (side.xreplace(positive) for side in relation.args)
    # NOTE: through the operators, in both directions: sympy's floor decides
    # floor(p/2) <= p in its __le__, which Le(...) and p >= floor(p/2) never ask
    forward, backward = compare
    return forward(lhs, rhs) is sympy.true or backward(rhs, lhs) is sympy.true


_COMPARISONS: dict[type, tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]]] = {
    sympy.Le: (operator.le, operator.ge), sympy.Lt: (operator.lt, operator.gt),
    sympy.Ge: (operator.ge, operator.le), sympy.Gt: (operator.gt, operator.lt),
}


def _exact_quotients_cancelled(relation: sympy.Basic) -> sympy.Basic:
    """``relation`` with the quotients torch knows to be exact (``(a*b + a)/(a + 1)``
    inside a ``Mod``, from its view-size checks) cancelled to polynomials the grammar can
    write (only ``//`` divides there); unchanged when nothing needs it."""
    try:
        symbolic.format_relation(relation)
        return relation
    except IRFormatError:
        return relation.replace(
            sympy.Mod, lambda p, q: sympy.Mod(sympy.cancel(p), sympy.cancel(q)))


def _floor_to_mod(expr: sympy.Basic) -> sympy.Basic:
    """``a//k`` (``k`` a positive int) as ``(a - a%k)/k``, everywhere in ``expr``."""

    def constant_divisor(e: sympy.Basic) -> bool:
        if not isinstance(e, sympy.floor):
            return False
        den = sympy.fraction(sympy.together(e.args[0]))[1]
        return bool(den.is_Integer and int(den) > 1)

    def rewrite(e: sympy.Basic) -> sympy.Basic:
        num, den = sympy.fraction(sympy.together(e.args[0]))
        return (num - sympy.Mod(num, den)) / den

    return expr.replace(constant_divisor, rewrite)


def _positive(factor: sympy.Basic, ranges: Mapping[str, SymbolRange]) -> bool:
    """A symbol (or a natural power of one) whose range starts at >= 1."""
    base = factor.base if isinstance(factor, sympy.Pow) and factor.exp.is_Integer else factor
    return (isinstance(base, sympy.Symbol)
            and ranges.get(base.name, SymbolRange(0)).lower >= 1)


def _without_positive_factors(expr: sympy.Basic,
                              ranges: Mapping[str, SymbolRange]) -> sympy.Basic:
    """``expr`` without its nonzero constant factor and positive symbol factors (which
    do not change whether it is 0)."""
    if not isinstance(expr, sympy.Mul):
        return expr
    return sympy.Mul(*[f for f in expr.args
                       if not (f.is_Number and f != 0) and not _positive(f, ranges)])


def _fact(relation: sympy.Basic, ranges: Mapping[str, SymbolRange]) -> _Fact | None:
    """``(a, k)`` for ``a%k == 0`` with ``a`` a product of positive symbols and ``k`` an
    int > 1; else None."""
    if not (isinstance(relation, sympy.Eq) and relation.args[1] == 0
            and isinstance(relation.args[0], sympy.Mod)):
        return None
    a, k = relation.args[0].args
    factors = a.args if isinstance(a, sympy.Mul) else (a,)
    if not (k.is_Integer and int(k) > 1 and all(_positive(f, ranges) for f in factors)):
        return None
    return a, int(k)


def _implied_by_facts(relation: sympy.Basic, facts: Sequence[_Fact],
                      ranges: Mapping[str, SymbolRange]) -> bool:
    """Whether ``relation`` holds once each fact ``a%k == 0`` is written ``a = k*q``
    (``q`` a new positive symbol): True after substitution, or by the ranges."""
    if not facts:
        return False
    extended = dict(ranges)
    for i, (a, k) in enumerate(facts):
        q = sympy.Symbol(f"_q{i}", integer=True, positive=True)
        extended[q.name] = SymbolRange(1)
        relation = relation.subs(a, k * q)
        if relation is sympy.true:
            return True
        if relation is sympy.false:
            return False
    return implied_by_ranges(relation, extended)
