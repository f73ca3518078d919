"""Collapsing a kernel's loop ranges into as few flat dimensions as its indexing allows.

A Triton kernel walks its outer iteration space with one flat ``xindex`` (and its
reduction space with one ``rindex``). Each loop variable is recovered from the flat index
with ``//`` and ``%``; every such division costs instructions and, worse, hides from
Triton's alignment analysis that consecutive lanes read consecutive addresses, which is
what makes a load vectorized.

So adjacent ranges ``(a, b)`` (``a`` outer) are merged into one dimension when every
index expression of the kernel uses them as ``c*b.size*a + c*b``, i.e. as one flat
variable: then ``a*b.size + b`` can stand for both. A contiguous elementwise kernel ends
up with one dimension and indexes as ``ptr + xindex``.

Variables of size 1 are always 0 and are dropped.

With symbolic sizes a coefficient or a size may be a ``sympy.Expr`` over the size
symbols (``x0*s1 + x1`` over ``[s0, s1]`` is one flat dimension of ``s0*s1``); the merge
test compares them with sympy. Static kernels use ints only, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sympy
from ember.inductor.loop_ir import Add, IndexExpr, Int, Mul, Size, Sym, Var, free_vars, substitute
from ember.inductor.loop_ir.symbolic_index import same_size

#: ``sum(coef[v] * v) + const``: coefficients and constant are ints, or sympy expressions
#: over size symbols
LinearForm = tuple[dict[str, Size], Size]


def drop_unit_vars(expr: IndexExpr, unit: set[str]) -> IndexExpr:
    """``expr`` with every size-1 variable in ``unit`` replaced by 0."""
    if not unit:
        return expr
    return substitute(expr, lambda v: Int(0) if v.name in unit else v)


def linear_form(expr: IndexExpr) -> LinearForm | None:
    """``expr`` as ``sum(coef[v] * v) + const``, or None when it is not linear (has a
    ``//``, ``%``, an indirect index, or a product of variables). Symbolic terms
    (:class:`Sym`) make symbolic coefficients or constants."""
    coefs: dict[str, Size] = {}
    const: Size = 0
    terms = expr.terms if isinstance(expr, Add) else (expr,)
    for t in terms:
        if isinstance(t, Int):
            const += t.value
        elif isinstance(t, Sym):
            const = const + t.expr
        elif isinstance(t, Var):
            coefs[t.name] = coefs.get(t.name, 0) + 1
        elif isinstance(t, Mul):
            var: Var | None = None
            c: Size = 1
            for f in t.factors:
                if isinstance(f, Int):
                    c *= f.value
                elif isinstance(f, Sym):
                    c = c * f.expr
                elif isinstance(f, Var) and var is None:
                    var = f
                else:
                    return None
            if var is None:
                const += c
            else:
                coefs[var.name] = coefs.get(var.name, 0) + c
        else:
            return None
    return coefs, const


@dataclass(frozen=True)
class Dim:
    """A merged dimension: the original variables, outermost first, and their
    strides within the merged flat index."""

    vars: tuple[Var, ...]

    @property
    def size(self) -> Size:
        n: Size = 1
        for v in self.vars:
            n *= v.size
        return n

    @property
    def inner(self) -> Var:
        return self.vars[-1]

    def stride_of(self, name: str) -> Size:
        """How far the merged index moves when variable ``name`` moves by one."""
        stride: Size = 1
        for v in reversed(self.vars):
            if v.name == name:
                return stride
            stride *= v.size
        raise KeyError(name)


def merge_dims(variables: Iterable[Var], exprs: list[IndexExpr]) -> list[Dim]:
    """Group ``variables`` (outermost first; size-1 variables already dropped) into
    dimensions that every expression in ``exprs`` indexes as one flat variable."""
    forms = [linear_form(e) for e in exprs]
    names_in_nonlinear: set[str] = set()
    for e, f in zip(exprs, forms):
        if f is None:
            names_in_nonlinear.update(v.name for v in free_vars(e))
    dims: list[list[Var]] = []
    for v in variables:
        if dims and _mergeable(dims[-1][-1], v, forms, names_in_nonlinear):
            dims[-1].append(v)
        else:
            dims.append([v])
    return [Dim(tuple(d)) for d in dims]


def _mergeable(
    outer: Var,
    inner: Var,
    forms: list[LinearForm | None],
    nonlinear: set[str],
) -> bool:
    if outer.name in nonlinear or inner.name in nonlinear:
        return False
    for f in forms:
        if f is None:
            continue
        coefs = f[0]
        if not same_size(coefs.get(outer.name, 0), coefs.get(inner.name, 0) * inner.size):
            return False
    return True
