"""The text grammar of symbolic sizes and guards: parsing (a whitelist over Python's
``ast``, never ``eval`` of unchecked text) into sympy, and printing sympy back as
canonical text. The public API is :mod:`ember.runtime.ir.symbolic`.

Grammar (docs/ir-contract.md, "Symbolic shapes"): integer literals; symbol names;
binary ``+ - *``; unary ``-``; ``//`` floor division; ``%`` Python modulo; ``Max(a, b,
...)``, ``Min(...)``; parentheses. Relations add ``== != < <= > >=``, ``and``, ``or``,
``not``.

Canonical text: expanded (``s0*s1+s0``, never ``s0*(s1+1)``); arithmetic without
spaces (``2*s0+1``, ``s0//2``, ``s0%16``), calls with ``", "`` between arguments
(``Max(1, s1)``), relations with spaces around comparison and boolean operators
(``s1 == 2*s0 and s0 > 4``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

import sympy
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.symbolic_grammar import (  # noqa: F401 - re-exported
    MAX_TEXT_LENGTH,
    SYMBOL_NAME_RE,
    checked_tree,
)

FUNCTIONS: dict[str, Callable[..., sympy.Expr]] = {"Max": sympy.Max, "Min": sympy.Min}
"""Calls allowed in the grammar, with their sympy meaning."""

_BINARY: dict[type[ast.operator], Callable[[sympy.Expr, sympy.Expr], sympy.Expr]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: sympy.floor(a / b),
    ast.Mod: sympy.Mod,
}

_COMPARE: dict[type[ast.cmpop], Callable[[sympy.Expr, sympy.Expr], sympy.Basic]] = {
    ast.Eq: sympy.Eq,
    ast.NotEq: sympy.Ne,
    ast.Lt: sympy.Lt,
    ast.LtE: sympy.Le,
    ast.Gt: sympy.Gt,
    ast.GtE: sympy.Ge,
}

_sympy_symbols: dict[str, sympy.Symbol] = {}


def symbol(name: str) -> sympy.Symbol:
    """The sympy symbol of IR symbol ``name`` (``integer=True``; the same object for the
    same name)."""
    s = _sympy_symbols.get(name)
    if s is None:
        s = _sympy_symbols[name] = sympy.Symbol(name, integer=True)
    return s


# -- text -> sympy --------------------------------------------------------------------


def to_sympy(node: ast.expr) -> sympy.Basic:
    """A checked ``ast`` node as sympy (see :func:`checked_tree`)."""
    if isinstance(node, ast.Constant):
        return sympy.Integer(node.value)
    if isinstance(node, ast.Name):
        return symbol(node.id)
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_expr(node.left), _expr(node.right))
    if isinstance(node, ast.UnaryOp):
        operand = to_sympy(node.operand)
        return sympy.Not(operand) if isinstance(node.op, ast.Not) else -_as_expr(operand)
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        return FUNCTIONS[node.func.id](*(_expr(a) for a in node.args))
    if isinstance(node, ast.BoolOp):
        combine = sympy.And if isinstance(node.op, ast.And) else sympy.Or
        return combine(*(to_sympy(v) for v in node.values))
    if isinstance(node, ast.Compare):
        parts = []
        left = _expr(node.left)
        for op, right_node in zip(node.ops, node.comparators):
            right = _expr(right_node)
            parts.append(_COMPARE[type(op)](left, right))
            left = right
        return parts[0] if len(parts) == 1 else sympy.And(*parts)
    raise AssertionError(f"unchecked node {type(node).__name__}")


def _expr(node: ast.expr) -> sympy.Expr:
    return _as_expr(to_sympy(node))


def _as_expr(value: sympy.Basic) -> sympy.Expr:
    assert isinstance(value, sympy.Expr)
    return value


# -- sympy -> text --------------------------------------------------------------------

_ADD, _MUL, _UNARY, _ATOM = 1, 2, 3, 4


def expr_text(e: sympy.Basic) -> str:
    """Canonical text of an integer-valued sympy expression.

    Raises:
        IRFormatError: for a sympy expression outside the grammar (a non-integer
            rational, an unknown function), naming it.
    """
    # NOTE: expanded, so that equal polynomials print equal (s0*(s1+1) == s0*s1+s0)
    return _text(sympy.expand(e), 0)


def _wrap(text: str, own: int, level: int) -> str:
    return f"({text})" if own < level else text


def _text(e: sympy.Basic, level: int) -> str:
    if isinstance(e, sympy.Integer):
        n = int(e)
        return _wrap(str(n), _UNARY if n < 0 else _ATOM, level)
    if isinstance(e, sympy.Symbol):
        return str(e.name)
    if isinstance(e, sympy.Add):
        return _wrap(_add_text(e), _ADD, level)
    if isinstance(e, sympy.Mul):
        coeff = e.as_coeff_Mul()[0]
        if coeff.is_negative:
            # (-a)*b == -(a*b): a product needs no parentheses after a unary minus
            negated = -e
            inner = (_product(negated) if isinstance(negated, (sympy.Mul, sympy.Pow))
                     else _text(negated, _UNARY))
            return _wrap("-" + inner, _UNARY, level)
        return _wrap(_product(e), _MUL, level)
    if isinstance(e, sympy.Pow):
        return _wrap(_product(e), _MUL, level)
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        return _wrap(f"{_text(num, _MUL)}//{_text(den, _ATOM)}", _MUL, level)
    if isinstance(e, sympy.ceiling):
        # ceiling(n/d) == -((-n)//d)
        num, den = sympy.fraction(sympy.together(e.args[0]))
        return _wrap(f"-({_text(-num, _MUL)}//{_text(den, _ATOM)})", _UNARY, level)
    if isinstance(e, sympy.Mod):
        a, b = e.args
        return _wrap(f"{_text(a, _MUL)}%{_text(b, _ATOM)}", _MUL, level)
    if isinstance(e, (sympy.Max, sympy.Min)):
        name = "Max" if isinstance(e, sympy.Max) else "Min"
        args = sorted(_text(a, 0) for a in e.args)
        return f"{name}({', '.join(args)})"
    raise IRFormatError(f"the sympy expression {e} ({type(e).__name__}) has no form in the "
                        "IR's size grammar (integers, symbols, + - * // %, Max, Min)")


def _add_text(e: sympy.Add) -> str:
    parts: list[str] = []
    for i, term in enumerate(e.as_ordered_terms()):
        if term.could_extract_minus_sign() and i > 0:
            parts.append("-" + _text(-term, _MUL))
        else:
            parts.append(("+" if i > 0 else "") + _text(term, _ADD if i == 0 else _MUL))
    return "".join(parts)


def _product(e: sympy.Basic) -> str:
    """``f1*f2*...`` of a positive product, each factor an atom (a ``//``, ``%`` or sum
    in parentheses)."""
    coeff, rest = e.as_coeff_Mul() if isinstance(e, sympy.Mul) else (sympy.Integer(1), e)
    if not coeff.is_Integer:
        raise IRFormatError(f"the sympy expression {e} is not an integer expression (its "
                            f"coefficient {coeff} is not an integer)")
    factors = [] if coeff == 1 else [str(int(coeff))]
    for f in rest.as_ordered_factors():
        if isinstance(f, sympy.Pow):
            base, exp = f.args
            if not (exp.is_Integer and int(exp) >= 1):
                raise IRFormatError(f"the sympy expression {e} divides by {base} (only // "
                                    "may divide)")
            factors.extend([_text(base, _ATOM)] * int(exp))
        else:
            factors.append(_text(f, _ATOM))
    return "*".join(factors)


_RELATION_OPS = {
    sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">",
    sympy.Ge: ">=",
}


def relation_text(rel: sympy.Basic) -> str:
    """Canonical text of a sympy relation (a comparison or ``And``/``Or``/``Not`` of
    them).

    Raises:
        IRFormatError: for a constant (``True``/``False``) or anything else that is not
            a relation, naming it.
    """
    if isinstance(rel, sympy.core.relational.Relational):
        canon = rel.canonical
        op = _RELATION_OPS.get(type(canon))
        if op is not None:
            return f"{expr_text(canon.lhs)} {op} {expr_text(canon.rhs)}"
    if isinstance(rel, (sympy.And, sympy.Or)):
        joiner = " and " if isinstance(rel, sympy.And) else " or "
        return joiner.join(sorted(_nested_relation(a) for a in rel.args))
    if isinstance(rel, sympy.Not):
        return f"not {_nested_relation(rel.args[0])}"
    raise IRFormatError(f"{rel} ({type(rel).__name__}) is not a relation between sizes")


def _nested_relation(rel: sympy.Basic) -> str:
    text = relation_text(rel)
    return f"({text})" if isinstance(rel, (sympy.And, sympy.Or, sympy.Not)) else text
