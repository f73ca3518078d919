"""Sizes over size symbols as sympy sees them: the text of a size for C++ or Python, and
the one proof the index builders need (``provably_nonnegative``). Pure sympy: the index
algebra (:mod:`.index`) and its symbolic part (:mod:`.symbolic_index`) both use it."""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator

import sympy


#: the symbols of the graph being compiled that may be negative (an integer read from a
#: tensor, ``k.item()``, that is not a size): set by ``symbolic_index.size_hints``
_SIGNED: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "ember_signed_symbols", default=frozenset())


@contextlib.contextmanager
def signed_symbols(names: frozenset[str]) -> Iterator[None]:
    """Within the block, :func:`provably_nonnegative` does not take ``names`` >= 1."""
    token = _SIGNED.set(names)
    try:
        yield
    finally:
        _SIGNED.reset(token)


def provably_nonnegative(expr: sympy.Expr) -> bool:
    """Whether ``expr`` >= 0 for every value >= 1 of its symbols (any value of those
    :func:`signed_symbols` names)."""
    if expr.is_Integer:
        return bool(expr >= 0)
    signed = _SIGNED.get()
    return _provably_nonnegative(expr, frozenset(
        s.name for s in expr.free_symbols if s.name in signed) if signed else frozenset())


@functools.lru_cache(maxsize=4096)
def _provably_nonnegative(expr: sympy.Expr, signed: frozenset[str]) -> bool:
    positive = {s: sympy.Dummy(s.name, integer=True, positive=True)
                for s in expr.free_symbols
                if isinstance(s, sympy.Symbol) and s.name not in signed}
    return bool(sympy.expand(expr.xreplace(positive)).is_nonnegative)



def size_text(size: int | sympy.Expr, div: str = "/") -> str:
    """C-like text of ``size`` (see :func:`.index.render_size`)."""
    if isinstance(size, int):
        return str(size)
    return _text(sympy.sympify(size), div)


def _text(e: sympy.Expr, div: str) -> str:
    if e.is_Integer:
        return str(int(e)) if e >= 0 else f"({int(e)})"
    if e.is_Symbol:
        return str(e)
    if isinstance(e, sympy.Add):
        terms = sorted(e.args, key=_term_order)
        out = _text(terms[0], div)
        for t in terms[1:]:
            coef, _ = t.as_coeff_Mul()
            if coef.is_negative:
                out += f" - {_text(-t, div)}"
            else:
                out += f" + {_text(t, div)}"
        return out
    if isinstance(e, sympy.Mul):
        coef, rest = e.as_coeff_Mul()
        if coef == -1:
            return f"(-{_text(rest, div)})"
        if not coef.is_Integer:
            raise ValueError(f"size {e} is not an integer expression")
        factors = sorted(sympy.Mul.make_args(rest), key=str)
        parts = [_operand(f, div) for f in factors]
        if coef != 1:
            parts.insert(0, _text(coef, div))
        return "*".join(parts)
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
        return "*".join([_operand(e.base, div)] * int(e.exp))
    if isinstance(e, sympy.floor):
        numer, denom = sympy.fraction(sympy.together(e.args[0]))
        n, d = _operand(numer, div), _operand(denom, div)
        if provably_nonnegative(numer):
            return f"({n} {div} {d})"
        # NOTE: C's / (and Triton's //) truncates toward zero: -1 / s1 is 0, not -1 (a
        # size s0 + (-1)//s1 + 1 ran one iteration too many). The numerator less its
        # non-negative remainder divides exactly in any rounding.
        return f"(({n} - ((({n} % {d}) + {d}) % {d})) {div} {d})"
    if isinstance(e, sympy.Mod):
        n, d = _operand(e.args[0], div), _operand(e.args[1], div)
        if provably_nonnegative(e.args[0]):
            return f"({n} % {d})"
        return f"((({n} % {d}) + {d}) % {d})"  # sympy's Mod is non-negative, C's % not
    if isinstance(e, (sympy.Max, sympy.Min)):
        name = ("max" if isinstance(e, sympy.Max) else "min")
        if div == "/":
            name = f"std::{name}<int64_t>"
        args = [_text(a, div) for a in sorted(e.args, key=str)]
        out = args[0]
        for a in args[1:]:  # std::max takes two arguments
            out = f"{name}({out}, {a})"
        return out
    raise ValueError(f"size expression {e} uses {type(e).__name__}, which is not a size "
                     f"operation (+ - * // % Max Min)")


def _operand(e: sympy.Expr, div: str) -> str:
    """``e``'s text, parenthesized when it is a sum or a product (an operand of ``*``,
    ``//`` or ``%``)."""
    text = _text(e, div)
    return f"({text})" if isinstance(e, (sympy.Add, sympy.Mul)) and "*" in text or \
        isinstance(e, sympy.Add) else text


def _term_order(t: sympy.Expr) -> tuple[int, int, str]:
    negative = t.as_coeff_Mul()[0].is_negative
    return (1 if negative else 0, 1 if t.is_Number else 0, str(t))
