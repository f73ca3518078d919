"""Whether two loop-IR index expressions address the same offsets: the memory plan's test
that a kernel reads a buffer only where it stores (``codegen/memory_plan.py``, in place of
a dead intermediate; ``codegen/input_writes.py``, in place of a mutated graph input)."""

from __future__ import annotations

from typing import Any

import torch
from ember.inductor.loop_ir.index import (
    Add,
    FloorDiv,
    IndexExpr,
    Int,
    Mod,
    Mul,
    Var,
    free_vars,
    indirect_values,
    size_symbols,
)

__all__ = ["SAME_INDEX_MAX_RANGE", "same_index"]

#: the most values of one loop variable :func:`same_index` evaluates
SAME_INDEX_MAX_RANGE = 1 << 22


def same_index(a: IndexExpr, b: IndexExpr) -> bool:
    """Whether two index expressions give the same offset at every point of their loop
    ranges: equal as written, or sums of terms of one loop variable each (a view's
    ``(x0 // 8)*1024 + (x0 % 8)*128 + x1`` against a store's ``x0*128 + x1``) whose parts
    in each variable agree at every value of it (evaluated; static ranges only)."""
    if a == b:
        return True
    parts_a, parts_b = _per_variable(a), _per_variable(b)
    if parts_a is None or parts_b is None or parts_a.keys() != parts_b.keys():
        return False
    for var, terms_a in parts_a.items():
        if var is None:
            if _evaluate(terms_a, None, 0) != _evaluate(parts_b[var], None, 0):
                return False
            continue
        if not isinstance(var.size, int) or var.size > SAME_INDEX_MAX_RANGE:
            return False
        values = torch.arange(var.size, dtype=torch.int64)
        if not torch.equal(_evaluate(terms_a, var, values), _evaluate(parts_b[var], var, values)):
            return False
    return True


def _per_variable(x: IndexExpr) -> dict[Var | None, list[IndexExpr]] | None:
    """The terms of ``x`` by the one loop variable each reads (None: constant terms), or
    None when a term reads two variables, a symbol or a loaded index."""
    parts: dict[Var | None, list[IndexExpr]] = {}
    for term in (x.terms if isinstance(x, Add) else (x,)):
        variables = set(free_vars(term))
        if len(variables) > 1 or size_symbols(term) or any(indirect_values(term)):
            return None
        parts.setdefault(next(iter(variables), None), []).append(term)
    return parts


def _evaluate(terms: list[IndexExpr], var: Var | None, value: Any) -> Any:
    return sum((_value(t, var, value) for t in terms), 0)


def _value(x: IndexExpr, var: Var | None, value: Any) -> Any:
    """``x`` with ``var`` at ``value`` (an int, or an int64 tensor of values)."""
    if isinstance(x, Int):
        return x.value
    if isinstance(x, Var):
        return value
    if isinstance(x, Add):
        return _evaluate(list(x.terms), var, value)
    if isinstance(x, Mul):
        out: Any = 1
        for f in x.factors:
            out = out * _value(f, var, value)
        return out
    if isinstance(x, (FloorDiv, Mod)) and isinstance(x.divisor, int):
        inner = _value(x.expr, var, value)
        return inner // x.divisor if isinstance(x, FloorDiv) else inner % x.divisor
    raise ValueError(f"cannot evaluate index {x}")  # excluded by _per_variable
