"""Index expressions: integer arithmetic over named loop ranges.

An index expression computes an element offset (in elements, relative to a tensor's data
pointer) or a coordinate from the loop variables of a kernel. The node types are a closed
set:

``Var(name, size)``     a loop variable ranging over ``0 .. size-1``
``Int(value)``          an integer constant
``Add(terms)``          the sum of two or more terms
``Mul(factors)``        the product of two or more factors
``FloorDiv(expr, d)``   ``expr // d`` for a positive constant ``d`` (``expr`` >= 0)
``Mod(expr, d)``        ``expr % d`` for a positive constant ``d`` (``expr`` >= 0)
``Indirect(value)``     the int64 body value named ``value`` (an index loaded from memory,
                        for gather / embedding / index); codegens read it as an integer

Build expressions with :func:`add`, :func:`mul`, :func:`floordiv` and :func:`mod`, which
fold constants, flatten and drop trivial terms, and use the variables' sizes to simplify
``(a*N + b) // N`` to ``a`` when ``0 <= b < N`` (and ``(a*c + b) // (c*k)`` to
``a // k`` when ``0 <= b < c``, likewise for ``%``). The dataclasses are frozen and hashable,
so equal expressions compare equal (the scheduler relies on this to match a consumer's
load with a producer's store).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Var:
    """A loop variable over ``0 .. size-1``."""

    name: str
    size: int

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Int:
    """An integer constant."""

    value: int

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class Add:
    """``terms[0] + terms[1] + ...``."""

    terms: tuple[IndexExpr, ...]

    def __str__(self) -> str:
        return "(" + " + ".join(str(t) for t in self.terms) + ")"


@dataclass(frozen=True)
class Mul:
    """``factors[0] * factors[1] * ...``."""

    factors: tuple[IndexExpr, ...]

    def __str__(self) -> str:
        return "*".join(str(f) for f in self.factors)


@dataclass(frozen=True)
class FloorDiv:
    """``expr // divisor`` (``expr`` is never negative)."""

    expr: IndexExpr
    divisor: int

    def __str__(self) -> str:
        return f"({self.expr} // {self.divisor})"


@dataclass(frozen=True)
class Mod:
    """``expr % divisor`` (``expr`` is never negative)."""

    expr: IndexExpr
    divisor: int

    def __str__(self) -> str:
        return f"({self.expr} % {self.divisor})"


@dataclass(frozen=True)
class Indirect:
    """The integer body value ``value`` used as an index (already wrapped to >= 0)."""

    value: str

    def __str__(self) -> str:
        return f"{{{self.value}}}"


IndexExpr = Var | Int | Add | Mul | FloorDiv | Mod | Indirect


def as_index(x: IndexExpr | int) -> IndexExpr:
    """Wrap a Python int as :class:`Int`."""
    return Int(x) if isinstance(x, int) else x


def add(*xs: IndexExpr | int) -> IndexExpr:
    """The simplified sum of ``xs``."""
    const = 0
    terms: list[IndexExpr] = []
    for x in map(as_index, xs):
        parts = x.terms if isinstance(x, Add) else (x,)
        for p in parts:
            if isinstance(p, Int):
                const += p.value
            else:
                terms.append(p)
    if const:
        terms.append(Int(const))
    if not terms:
        return Int(0)
    return terms[0] if len(terms) == 1 else Add(tuple(terms))


def canonical(x: IndexExpr) -> IndexExpr:
    """``x`` with the terms of its top-level sum in a fixed order: two orderings of
    one affine index (``a*32 + b`` and ``b + a*32``) compare equal after this."""
    if isinstance(x, Add):
        return Add(tuple(sorted(x.terms, key=str)))
    return x


def mul(*xs: IndexExpr | int) -> IndexExpr:
    """The simplified product of ``xs`` (a product with a sum distributes over it)."""
    const = 1
    factors: list[IndexExpr] = []
    for x in map(as_index, xs):
        parts = x.factors if isinstance(x, Mul) else (x,)
        for p in parts:
            if isinstance(p, Int):
                const *= p.value
            else:
                factors.append(p)
    if const == 0:
        return Int(0)
    if not factors:
        return Int(const)
    # Distribute a constant over one sum so that offsets stay flat sums of scaled terms.
    if len(factors) == 1 and isinstance(factors[0], Add):
        return add(*(mul(t, const) for t in factors[0].terms))
    if const != 1:
        factors.append(Int(const))
    return factors[0] if len(factors) == 1 else Mul(tuple(factors))


def upper_bound(x: IndexExpr) -> int | None:
    """The largest value ``x`` can take, or None when unknown (indirect indices)."""
    if isinstance(x, Var):
        return x.size - 1
    if isinstance(x, Int):
        return x.value
    if isinstance(x, Add):
        total = 0
        for t in x.terms:
            b = upper_bound(t)
            if b is None:
                return None
            total += b
        return total
    if isinstance(x, Mul):
        prod = 1
        for f in x.factors:
            b = upper_bound(f)
            if b is None or b < 0:
                return None
            prod *= b
        return prod
    if isinstance(x, FloorDiv):
        b = upper_bound(x.expr)
        return None if b is None else b // x.divisor
    if isinstance(x, Mod):
        return x.divisor - 1
    return None


def _coefficient(term: IndexExpr) -> int:
    if isinstance(term, Int):
        return term.value
    if isinstance(term, Mul) and isinstance(term.factors[-1], Int):
        return term.factors[-1].value
    return 1


def _divide_term(term: IndexExpr, d: int) -> IndexExpr:
    if isinstance(term, Int):
        return Int(term.value // d)
    assert isinstance(term, Mul) and isinstance(term.factors[-1], Int)
    return mul(*term.factors[:-1], term.factors[-1].value // d)


def _split_by_divisor(x: IndexExpr, d: int) -> tuple[list[IndexExpr], list[IndexExpr]]:
    terms = list(x.terms) if isinstance(x, Add) else [x]
    multiples = [t for t in terms if _coefficient(t) % d == 0 and _coefficient(t) != 0]
    rest = [t for t in terms if not (_coefficient(t) % d == 0 and _coefficient(t) != 0)]
    return multiples, rest


def floordiv(x: IndexExpr | int, d: int) -> IndexExpr:
    """``x // d`` for non-negative ``x``, simplified."""
    x = as_index(x)
    if d == 1:
        return x
    if isinstance(x, Int):
        return Int(x.value // d)
    if isinstance(x, FloorDiv):
        return floordiv(x.expr, x.divisor * d)
    multiples, rest = _split_by_divisor(x, d)
    rest_expr = add(*rest)
    bound = upper_bound(rest_expr)
    if bound is not None and bound < d and all(_nonneg(t) for t in rest):
        return add(*(_divide_term(t, d) for t in multiples))
    if multiples and all(_nonneg(t) for t in rest):
        return add(*(_divide_term(t, d) for t in multiples), floordiv(rest_expr, d))
    split = _split_by_factor(x, d)
    if split is not None:
        big, c = split
        return floordiv(big, d // c)
    return FloorDiv(x, d)


def _split_by_factor(x: IndexExpr, d: int) -> tuple[IndexExpr, int] | None:
    """``(A, c)`` such that ``x == c*A + r`` with ``c`` dividing ``d`` and ``0 <= r < c``
    (so ``x // d == A // (d // c)`` and ``x % d == c*(A % (d // c)) + r``), or None.

    This is what lets ``(x0*16384 + x1*128 + x2) // 65536`` with ``x1*128 + x2 < 16384``
    become ``x0 // 4``: an index of a 3-d view of a 4-d buffer stays affine in the
    innermost loop variables (vectorizable) instead of dividing per element."""
    terms = list(x.terms) if isinstance(x, Add) else [x]
    if not all(_nonneg(t) for t in terms):
        return None
    for c in sorted({_coefficient(t) for t in terms}, reverse=True):
        if c <= 1 or d % c:
            continue
        big = [t for t in terms if _coefficient(t) % c == 0]
        rest = [t for t in terms if _coefficient(t) % c != 0]
        bound = upper_bound(add(*rest))
        if big and bound is not None and bound < c:
            return add(*(_divide_term(t, c) for t in big)), c
    return None


def mod(x: IndexExpr | int, d: int) -> IndexExpr:
    """``x % d`` for non-negative ``x``, simplified."""
    x = as_index(x)
    if d == 1:
        return Int(0)
    if isinstance(x, Int):
        return Int(x.value % d)
    _, rest = _split_by_divisor(x, d)
    rest_expr = add(*rest)
    if not all(_nonneg(t) for t in rest):
        return Mod(x, d)
    bound = upper_bound(rest_expr)
    if bound is not None and bound < d:
        return rest_expr
    split = _split_by_factor(rest_expr, d)
    if split is not None:
        big, c = split
        _, small = _split_by_divisor(rest_expr, c)
        return add(mul(mod(big, d // c), c), *small)
    return Mod(rest_expr, d)


def _nonneg(x: IndexExpr) -> bool:
    if isinstance(x, Int):
        return x.value >= 0
    if isinstance(x, Mul):
        return all(_nonneg(f) for f in x.factors)
    if isinstance(x, Add):
        return all(_nonneg(t) for t in x.terms)
    return True


def free_vars(x: IndexExpr) -> Iterator[Var]:
    """The loop variables ``x`` reads."""
    if isinstance(x, Var):
        yield x
    elif isinstance(x, Add):
        for t in x.terms:
            yield from free_vars(t)
    elif isinstance(x, Mul):
        for f in x.factors:
            yield from free_vars(f)
    elif isinstance(x, (FloorDiv, Mod)):
        yield from free_vars(x.expr)


def is_affine(x: IndexExpr) -> bool:
    """Whether ``x`` has no ``FloorDiv`` or ``Mod`` (a sum of products of variables,
    constants and indirect values)."""
    if isinstance(x, (FloorDiv, Mod)):
        return False
    if isinstance(x, Add):
        return all(is_affine(t) for t in x.terms)
    if isinstance(x, Mul):
        return all(is_affine(f) for f in x.factors)
    return True


def indirect_values(x: IndexExpr) -> Iterator[str]:
    """The body values ``x`` reads through :class:`Indirect`."""
    if isinstance(x, Indirect):
        yield x.value
    elif isinstance(x, Add):
        for t in x.terms:
            yield from indirect_values(t)
    elif isinstance(x, Mul):
        for f in x.factors:
            yield from indirect_values(f)
    elif isinstance(x, (FloorDiv, Mod)):
        yield from indirect_values(x.expr)


def substitute(x: IndexExpr, fn: Callable[[Var], IndexExpr]) -> IndexExpr:
    """``x`` with every variable ``v`` replaced by ``fn(v)``, re-simplified."""
    if isinstance(x, Var):
        return fn(x)
    if isinstance(x, Add):
        return add(*(substitute(t, fn) for t in x.terms))
    if isinstance(x, Mul):
        return mul(*(substitute(f, fn) for f in x.factors))
    if isinstance(x, FloorDiv):
        return floordiv(substitute(x.expr, fn), x.divisor)
    if isinstance(x, Mod):
        return mod(substitute(x.expr, fn), x.divisor)
    return x


def render(
    x: IndexExpr,
    name: Callable[[Var], str],
    indirect: Callable[[str], str],
    div: str = "/",
) -> str:
    """C-like text of ``x``: ``+``, ``*``, ``div`` (floor division of non-negatives), ``%``.

    ``name`` prints a variable, ``indirect`` an indirect body value; ``div`` is the
    integer-division operator (``/`` in C++, ``//`` in Python/Triton). Both codegens
    print index expressions through this function.
    """
    if isinstance(x, Var):
        return name(x)
    if isinstance(x, Int):
        return str(x.value) if x.value >= 0 else f"({x.value})"
    if isinstance(x, Indirect):
        return indirect(x.value)
    if isinstance(x, Add):
        return "(" + " + ".join(render(t, name, indirect, div) for t in x.terms) + ")"
    if isinstance(x, Mul):
        return "*".join(render(f, name, indirect, div) for f in x.factors)
    if isinstance(x, FloorDiv):
        return f"({render(x.expr, name, indirect, div)} {div} {x.divisor})"
    return f"({render(x.expr, name, indirect, div)} % {x.divisor})"
