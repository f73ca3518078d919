"""Symbolic sizes in Triton kernels: their text, their hints and their bounds.

A kernel over symbolic sizes takes the size symbols it uses (``Kernel.size_args``: ``s0``,
``s1``, ...) as plain integer parameters after its pointers; its numels, masks, loop
bounds and index math are expressions over them (``xnumel = 64*s0``). Nothing about a
size becomes a ``tl.constexpr``: Triton specializes an integer argument only on what it
always does (divisibility by 16), so one binary serves every size of that class.

Heuristics (block sizes, persistent or looped reductions) read sizes at their *hint*,
the example value the graph was captured with; correctness may only depend on a size's
*range*: a choice that must hold for every size (a whole row in one block, 32-bit
indexes) is made on the range's upper bound, and an unbounded size takes the general
choice (:class:`SizeFacts`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import sympy
from ember.inductor.loop_ir import Size, render_size
from ember.inductor.loop_ir.symbolic_index import hint, symbol_ranges
from ember.runtime.ir import SymbolRange, symbolic

#: more symbols than this in one size: its upper bound is not searched (taken unknown)
MAX_BOUND_SYMBOLS = 6


def is_static(size: Size) -> bool:
    """Whether ``size`` is a plain int (or a constant sympy number)."""
    return isinstance(size, int) or bool(getattr(size, "is_Integer", False))


def size_source(size: Size) -> str:
    """Triton source of a size over the kernel's size arguments (named after the
    symbols): ``64*s0``, ``(s0*s1 // 2)``, ``max(s0, 4)`` (Triton's builtin ``max`` /
    ``min`` of scalars, in the JIT and the interpreter)."""
    if is_static(size):
        return str(int(size))
    return render_size(sympy.sympify(size), "//")


def operand_source(size: Size) -> str:
    """:func:`size_source`, parenthesized unless it is a number or a symbol (an operand
    of ``*``, ``//``, ``%`` or ``<``)."""
    text = size_source(size)
    if is_static(size) or sympy.sympify(size).is_Symbol:
        return text
    return f"({text})"


def blocks(numel: Size, block: int) -> int | str:
    """How many blocks of ``block`` cover ``numel``: an int, or (symbolic ``numel``) the
    canonical text of ``(numel + block - 1) // block``, which the launcher evaluates
    from the size arguments at each launch (a launch grid dimension)."""
    if is_static(numel):
        return (int(numel) + block - 1) // block
    count = symbolic.format(sympy.floor((sympy.sympify(numel) + block - 1) / block))
    return count if isinstance(count, str) else int(count)


def chunk(total: Size, parts: int, block: int) -> Size:
    """The share of ``total`` each of ``parts`` programs walks, rounded up to a multiple of
    ``block`` (an int, or the expression over the size symbols: a split reduction's
    chunk of a row, a mixed kernel's rows a program)."""
    if is_static(total):
        per_part = (int(total) + parts - 1) // parts
        return (per_part + block - 1) // block * block
    per_part = sympy.floor((sympy.sympify(total) + parts - 1) / parts)
    result: Size = sympy.floor((per_part + block - 1) / block) * block
    return result


class SizeFacts:
    """What code generation may assume about the symbols of one kernel: their hints
    (for heuristics) and ranges (for decisions every size must satisfy).

    ``symbols`` maps symbol names to their :class:`~ember.runtime.ir.SymbolRange`. Without
    it (the backend's default), hints and ranges are the compiling graph's
    (``loop_ir.symbolic_index.hint`` and ``symbol_ranges``). A symbol without an upper
    bound gets the choices that hold for any size."""

    def __init__(self, symbols: Mapping[str, SymbolRange] | None = None) -> None:
        self.symbols = None if symbols is None else dict(symbols)

    def hint(self, size: Size) -> int:
        """``size`` at the hints of its symbols (an int stays itself). A symbolic size
        is at least 1 at its hint: sizes 0 and 1 specialise, and an expression that
        floors to 0 at a guessed hint (``120 // u0`` at an unbacked ``u0``'s fallback
        hint) must still give the kernel a block of at least one element."""
        if is_static(size):
            return int(size)
        expr = sympy.sympify(size)
        if self.symbols is None:
            return hint(expr)
        values = {s: symbolic.hint_of(s.name, self.symbols.get(s.name, SymbolRange()))
                  for s in expr.free_symbols if isinstance(s, sympy.Symbol)}
        return max(1, int(expr.xreplace(values)))

    def upper(self, size: Size) -> int | None:
        """The largest value ``size`` takes over its symbols' ranges, or None when a
        symbol is unbounded. Sizes are searched at the corners of the ranges (sizes are
        sums and products of non-negative sizes, monotone in each symbol)."""
        if is_static(size):
            return int(size)
        expr = sympy.sympify(size)
        names = sorted((s for s in expr.free_symbols if isinstance(s, sympy.Symbol)),
                       key=str)
        symbols = symbol_ranges() if self.symbols is None else self.symbols
        if len(names) > MAX_BOUND_SYMBOLS:
            return None
        corners: list[tuple[int, ...]] = []
        for s in names:
            r = symbols.get(s.name)
            if r is None or r.upper is None:
                return None
            corners.append((max(0, r.lower), r.upper))
        return max(int(expr.xreplace(dict(zip(names, point))))
                   for point in itertools.product(*corners))
