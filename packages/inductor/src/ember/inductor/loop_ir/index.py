"""Index expressions: integer arithmetic over named loop ranges.

An index expression computes an element offset (in elements, relative to a tensor's data
pointer) or a coordinate from the loop variables of a kernel. The node types are a closed
set:

``Var(name, size)``     a loop variable ranging over ``0 .. size-1`` (``size``: an int, or a
                        ``sympy.Expr`` over the graph's size symbols)
``Int(value)``          an integer constant
``Sym(expr)``           a ``sympy.Expr`` over size symbols (``s0``, ``u0``): a symbolic
                        stride, offset or size inside an index, known at run time
``Add(terms)``          the sum of two or more terms
``Mul(factors)``        the product of two or more factors
``FloorDiv(expr, d)``   ``expr // d`` for a positive ``d`` (an int or a :class:`Sym`; ``expr`` >= 0)
``Mod(expr, d)``        ``expr % d`` for a positive ``d`` (an int or a :class:`Sym`; ``expr`` >= 0)
``Indirect(value)``     the int64 body value named ``value`` (an index loaded from memory,
                        for gather / embedding / index); codegens read it as an integer

Build expressions with :func:`add`, :func:`mul`, :func:`floordiv` and :func:`mod`, which
fold constants, flatten and drop trivial terms, and use the variables' sizes to simplify
``(a*N + b) // N`` to ``a`` when ``0 <= b < N`` (and ``(a*c + b) // (c*k)`` to
``a // k`` when ``0 <= b < c``, likewise for ``%``). The dataclasses are frozen and hashable,
so equal expressions compare equal (the scheduler relies on this to match a consumer's
load with a producer's store).

Symbolic sizes (:mod:`.symbolic_index`): the builders merge every :class:`Sym` term of a
sum (and every :class:`Sym` factor of a product) into one, so an expression has one
canonical form; a divisor or bound that involves a symbol is reasoned about with sympy
(``(a*s1 + b) // s1`` is ``a`` when ``b < s1`` is provable). Static expressions never
contain a ``Sym`` and simplify exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeAlias

import sympy
from ember.inductor.loop_ir.size_text import provably_nonnegative, size_text

#: a loop-IR size: a plain int, or a sympy expression over the graph's size symbols
Size: TypeAlias = "int | sympy.Expr"


@dataclass(frozen=True)
class Var:
    """A loop variable over ``0 .. size-1``."""

    name: str
    size: Size

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Int:
    """An integer constant."""

    value: int

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class Sym:
    """A symbolic integer term (a ``sympy.Expr`` over size symbols, never constant)."""

    expr: sympy.Expr

    def __str__(self) -> str:
        text = render_size(self.expr, "//")
        return f"({text})" if isinstance(self.expr, sympy.Add) else text


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
    divisor: int | Sym

    def __str__(self) -> str:
        return f"({self.expr} // {_divisor_text(self.divisor)})"


@dataclass(frozen=True)
class Mod:
    """``expr % divisor`` (``expr`` is never negative)."""

    expr: IndexExpr
    divisor: int | Sym

    def __str__(self) -> str:
        return f"({self.expr} % {_divisor_text(self.divisor)})"


def _divisor_text(d: int | Sym) -> str:
    text = str(d)
    return text if isinstance(d, int) or d.expr.is_Symbol or text.startswith("(") \
        else f"({text})"


@dataclass(frozen=True)
class Indirect:
    """The integer body value ``value`` used as an index (already wrapped to >= 0)."""

    value: str

    def __str__(self) -> str:
        return f"{{{self.value}}}"


IndexExpr = Var | Int | Sym | Add | Mul | FloorDiv | Mod | Indirect

#: ``floordiv``/``mod`` by a symbolic divisor, proved with sympy: filled in by
#: :mod:`.symbolic_index` (which imports this module; ``loop_ir`` imports both)
SYMBOLIC_DIVISION: dict[str, Callable[[IndexExpr, sympy.Expr], IndexExpr]] = {}


def as_index(x: IndexExpr | Size) -> IndexExpr:
    """Wrap a Python int as :class:`Int`, a sympy expression as :class:`Sym` (an
    :class:`Int` when it is constant)."""
    if isinstance(x, int):
        return Int(x)
    if isinstance(x, sympy.Basic):
        return Int(int(x)) if x.is_Integer else Sym(x)
    return x


def add(*xs: IndexExpr | Size) -> IndexExpr:
    """The simplified sum of ``xs``."""
    const = 0
    terms: list[IndexExpr] = []
    symbolic: sympy.Expr | None = None
    for x in xs:
        if type(x) is int:  # NOTE: the common case (offsets, strides), without an Int
            const += x
            continue
        x = as_index(x)
        parts = x.terms if isinstance(x, Add) else (x,)
        for p in parts:
            if isinstance(p, Int):
                const += p.value
            elif isinstance(p, Sym):
                symbolic = p.expr if symbolic is None else symbolic + p.expr
            else:
                terms.append(p)
    if symbolic is not None:
        sym = as_index(sympy.expand(symbolic))
        if isinstance(sym, Int):
            const += sym.value
        else:
            terms.append(sym)
    if len(terms) >= 2 and (folded := _fold_div_mod(terms)) is not None:
        return add(*folded, const)
    if const:
        terms.append(Int(const))
    if not terms:
        return Int(0)
    return terms[0] if len(terms) == 1 else Add(tuple(terms))


def _core(term: IndexExpr) -> IndexExpr:
    """``term`` without its trailing int coefficient (see :func:`_coefficient`)."""
    if isinstance(term, Mul) and isinstance(term.factors[-1], Int):
        rest = term.factors[:-1]
        return rest[0] if len(rest) == 1 else Mul(rest)
    return term


def _fold_div_mod(terms: list[IndexExpr]) -> list[IndexExpr] | None:
    """``terms`` with one pair ``(e // c)*(c*k) + (e % c)*k`` replaced by ``e*k``, or None
    when no such pair is there. A view that splits a dimension and a producer that
    stores it whole then index alike (GPT-2's MLP: the GELU over ``[16, 512, 3072]``
    reads the ``[8192, 3072]`` matmul result at ``(x0 // 512)*1572864 + (x0 % 512)*3072``,
    which is ``x0*3072``, the template's store index: the epilogue fuses)."""
    for i, t in enumerate(terms):
        core = _core(t)
        if not isinstance(core, Mod) or not isinstance(core.divisor, int):
            continue
        k = _coefficient(t)
        quotient, scale = FloorDiv(core.expr, core.divisor), k * core.divisor
        for j, u in enumerate(terms):
            if j != i and _coefficient(u) == scale and _core(u) == quotient:
                # the folded term takes the pair's first place: the order stays natural
                first = min(i, j)
                return [mul(core.expr, k) if n == first else x
                        for n, x in enumerate(terms) if n != max(i, j)]
    return None


def canonical(x: IndexExpr) -> IndexExpr:
    """``x`` with the terms of its top-level sum in a fixed order: two orderings of
    one affine index (``a*32 + b`` and ``b + a*32``) compare equal after this."""
    if isinstance(x, Add):
        return Add(tuple(sorted(x.terms, key=str)))
    return x


def mul(*xs: IndexExpr | Size) -> IndexExpr:
    """The simplified product of ``xs`` (a product with a sum distributes over it)."""
    if len(xs) == 2 and type(k := xs[1]) is int:  # NOTE: an index times a stride
        first = xs[0]
        assert isinstance(k, int)
        if k == 0:
            return Int(0)
        if type(first) is int:
            return Int(first * k)
        if isinstance(first, Int):
            return Int(first.value * k)
        if isinstance(first, (Var, FloorDiv, Mod, Indirect)):  # one factor, as below
            return first if k == 1 else Mul((first, Int(k)))
    const = 1
    factors: list[IndexExpr] = []
    symbolic: sympy.Expr | None = None
    for x in map(as_index, xs):
        parts = x.factors if isinstance(x, Mul) else (x,)
        for p in parts:
            if isinstance(p, Int):
                const *= p.value
            elif isinstance(p, Sym):
                symbolic = p.expr if symbolic is None else symbolic * p.expr
            else:
                factors.append(p)
    if const == 0:
        return Int(0)
    if symbolic is not None:
        if not factors or any(isinstance(f, Add) for f in factors):
            # a symbolic constant: one Sym (or distribute it over a sum)
            symbolic, const = symbolic * const, 1
        else:
            # x0*(128*s1) is x0*s1*128: the int coefficient stays the last factor, where
            # floordiv/mod look for it
            coef, symbolic = sympy.expand(symbolic).as_coeff_Mul()
            if not coef.is_Integer:
                coef, symbolic = sympy.Integer(1), coef * symbolic
            const *= int(coef)
        sym = as_index(sympy.expand(symbolic))
        if isinstance(sym, Int):
            const *= sym.value
            if const == 0:
                return Int(0)
        else:
            factors.insert(0, sym) if not factors else factors.append(sym)
    if symbolic is not None and any(isinstance(f, Add) for f in factors):
        # NOTE: distribute symbolic factors over a sum (offsets stay flat sums of scaled
        # terms: a view's index then matches a producer's store index)
        sums = [f for f in factors if isinstance(f, Add)]
        others = [f for f in factors if not isinstance(f, Add)]
        if len(sums) == 1:
            return add(*(mul(t, *others, const) for t in sums[0].terms))
    if not factors:
        return Int(const)
    # Distribute a constant over one sum so that offsets stay flat sums of scaled terms.
    if len(factors) == 1 and isinstance(factors[0], Add):
        return add(*(mul(t, const) for t in factors[0].terms))
    if const != 1:
        factors.append(Int(const))
    return factors[0] if len(factors) == 1 else Mul(tuple(factors))


def upper_bound(x: IndexExpr) -> int | None:
    """The largest value ``x`` can take, or None when unknown (indirect indices, symbolic
    sizes: :func:`.symbolic_index.symbolic_upper_bound` bounds those)."""
    if isinstance(x, Var):
        return x.size - 1 if isinstance(x.size, int) else None
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
    if isinstance(x, FloorDiv) and isinstance(x.divisor, int):
        b = upper_bound(x.expr)
        return None if b is None else b // x.divisor
    if isinstance(x, Mod) and isinstance(x.divisor, int):
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


def _divisor(d: int | Sym | sympy.Expr) -> int | sympy.Expr:
    """A divisor as an int, or as a sympy expression when it is symbolic."""
    if isinstance(d, Sym):
        d = d.expr
    if isinstance(d, sympy.Basic) and d.is_Integer:
        return int(d)
    return d


def floordiv(x: IndexExpr | Size, d: int | Sym | sympy.Expr) -> IndexExpr:
    """``x // d`` for non-negative ``x`` and positive ``d``, simplified."""
    x = as_index(x)
    d = _divisor(d)
    if not isinstance(d, int):
        return SYMBOLIC_DIVISION["floordiv"](x, d)
    if d == 1:
        return x
    if isinstance(x, Int):
        return Int(x.value // d)
    if isinstance(x, FloorDiv):
        inner = x.divisor.expr if isinstance(x.divisor, Sym) else x.divisor
        return floordiv(x.expr, inner * d)
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


def mod(x: IndexExpr | Size, d: int | Sym | sympy.Expr) -> IndexExpr:
    """``x % d`` for non-negative ``x`` and positive ``d``, simplified."""
    x = as_index(x)
    d = _divisor(d)
    if not isinstance(d, int):
        return SYMBOLIC_DIVISION["mod"](x, d)
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
    if isinstance(x, Sym):
        return provably_nonnegative(x.expr)
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


def size_symbols(x: IndexExpr) -> set[str]:
    """The names of the size symbols ``x`` uses (in :class:`Sym` terms and divisors, and
    in its variables' sizes): what a kernel computing ``x`` takes as size arguments."""
    found: set[str] = set()
    if isinstance(x, Sym):
        found.update(str(s) for s in x.expr.free_symbols)
    elif isinstance(x, Var) and not isinstance(x.size, int):
        found.update(str(s) for s in x.size.free_symbols)
    elif isinstance(x, Add):
        for t in x.terms:
            found |= size_symbols(t)
    elif isinstance(x, Mul):
        for f in x.factors:
            found |= size_symbols(f)
    elif isinstance(x, (FloorDiv, Mod)):
        found |= size_symbols(x.expr)
        if isinstance(x.divisor, Sym):
            found |= size_symbols(x.divisor)
    return found


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
    sym: Callable[[sympy.Expr], str] | None = None,
) -> str:
    """C-like text of ``x``: ``+``, ``*``, ``div`` (floor division of non-negatives), ``%``.

    ``name`` prints a variable, ``indirect`` an indirect body value; ``div`` is the
    integer-division operator (``/`` in C++, ``//`` in Python/Triton). ``sym`` prints a
    symbolic term (default: :func:`render_size` over the kernel's size arguments, which
    are named after the symbols). Both codegens print index expressions through this
    function.
    """
    if isinstance(x, Var):
        return name(x)
    if isinstance(x, Int):
        return str(x.value) if x.value >= 0 else f"({x.value})"
    if isinstance(x, Sym):
        text = sym(x.expr) if sym is not None else render_size(x.expr, div)
        return f"({text})" if isinstance(x.expr, sympy.Add) else text
    if isinstance(x, Indirect):
        return indirect(x.value)
    if isinstance(x, Add):
        return "(" + " + ".join(render(t, name, indirect, div, sym) for t in x.terms) + ")"
    if isinstance(x, Mul):
        return "*".join(render(f, name, indirect, div, sym) for f in x.factors)
    d = str(x.divisor)
    if isinstance(x.divisor, Sym):
        d = render(x.divisor, name, indirect, div, sym)
        if not (x.divisor.expr.is_Symbol or isinstance(x.divisor.expr, sympy.Add)):
            d = f"({d})"  # x // (3*s0), not (x // 3)*s0
    if isinstance(x, FloorDiv):
        return f"({render(x.expr, name, indirect, div, sym)} {div} {d})"
    return f"({render(x.expr, name, indirect, div, sym)} % {d})"


def render_size(size: Size, div: str = "/") -> str:
    """C-like text of a size (an int, or a sympy expression over size symbols, each
    printed as its name): ``+ - *``, ``div`` for floor division (``/`` in C++, ``//`` in
    Python; a numerator that may be negative is rounded down in either), ``%``
    (non-negative, as sympy's), ``max``/``min`` (``std::max`` /
    ``std::min`` of ``int64_t`` in C++).

    Raises:
        ValueError: the expression uses a function that is not a size operation.
    """
    return size_text(size, div)
