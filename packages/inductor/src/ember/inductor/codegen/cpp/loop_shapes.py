"""The shapes of the C++ loops: sizes as C++ text, the coefficient of a loop variable in
an index, when SIMD lanes of a scatter never collide, the row-major position over the
reduction ranges. Sizes may be symbolic (``int64_t`` size arguments of the kernel);
choices between loop forms compare them at the graph's hints."""

from __future__ import annotations

from ember.inductor.loop_ir import (
    Add,
    IndexExpr,
    Int,
    Kernel,
    Load,
    Mul,
    Size,
    Store,
    Sym,
    Var,
    free_vars,
    render_size,
)
from ember.inductor.loop_ir.index import indirect_values
from ember.inductor.loop_ir.symbolic_index import hint


def lanes_never_collide(kernel: Kernel) -> bool:
    """Whether the iterations of the innermost loop of a pointwise kernel that adds
    through indirect indexes (a scatter) write distinct elements: every accumulating
    store's index has a nonzero constant factor of the innermost variable, and its
    indirect part does not depend on it (the embedding gradient: ``row[i] * D + d``
    over ``d``). Then SIMD lanes may run those iterations together."""
    xl = kernel.ranges[-1]
    varying = kernel.values_depending_on({xl.name})
    for s in kernel.body:
        if not (isinstance(s, Store) and s.mode == "add"):
            continue
        if coefficient(s.index, xl) in (None, 0):
            return False
        if any(v in varying for v in indirect_values(s.index)):
            return False
    return True


def coefficient(index: IndexExpr, var: Var) -> Size | None:
    """The constant factor of ``var`` in an affine ``index`` (0: absent; None: not a
    plain scaled term; a sympy expression for a symbolic stride, at least 1)."""
    terms = index.terms if isinstance(index, Add) else (index,)
    found: Size = 0
    for t in terms:
        if t == var:
            found += 1
        elif isinstance(t, Mul) and var in t.factors:
            if t.factors.count(var) != 1:
                return None
            factor: Size = 1
            for f in t.factors:
                if isinstance(f, Int):
                    factor = factor * f.value
                elif isinstance(f, Sym):
                    factor = factor * f.expr
                elif f != var:
                    return None
            found = found + factor
        elif var in free_vars(t):
            return None
    return found


def size_text(size: Size) -> str:
    """C++ text of a size (a literal, or an expression over the size arguments)."""
    return render_size(size, "/")


def above(size: Size, bound: int) -> bool:
    """Whether ``size > bound``; a symbolic size is compared at its hint (the loop
    forms this chooses between are correct for every size: only speed depends on it)."""
    return hint(size) > bound


def linear_position(rvars: tuple[Var, ...]) -> str:
    """The row-major position over the reduction variables ``rvars``, as C++ text."""
    parts = []
    for i, v in enumerate(rvars):
        inner: Size = 1
        for w in rvars[i + 1:]:
            inner = inner * w.size
        text = size_text(inner) if isinstance(inner, int) else f"({size_text(inner)})"
        parts.append(f"{v.name}*{text}")
    return " + ".join(parts)


def column_tiled(kernel: Kernel) -> bool:
    """Whether a reduction reads memory contiguous in the last outer variable but strided
    in the reduction (``x.sum(0)``): its C++ loops then walk the reduction with a tile of
    outer points innermost (``CppKernelWriter.body_tiled``)."""
    if not kernel.is_reduction or not kernel.ranges or not above(kernel.ranges[-1].size, 3):
        return False
    xl, rl = kernel.ranges[-1], kernel.reduction_ranges[-1]
    return any(
        isinstance(s, Load) and coefficient(s.index, xl) == 1
        and coefficient(s.index, rl) not in (None, 0, 1)
        for s in kernel.body)
