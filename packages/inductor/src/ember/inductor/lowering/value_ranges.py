"""Compile-time integer ranges of loop-IR values, so that a run-time check whose failure
is impossible (``lowering/checks.py``) is not emitted.

:func:`value_range` follows a value's definition through the statements a builder holds:
literals, loop positions (``IndexValue``: arange, iota), integer arithmetic, casts, and
loads from buffers whose contents are known (a graph constant's values; an argmax/argmin
over ``n`` elements is in ``[0, n)``; a pointwise buffer's element function, analysed the
same way). Anything else is unknown (None): the check stays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from ember.inductor.loop_ir import (
    Add,
    Compute,
    FloorDiv,
    IndexExpr,
    IndexValue,
    Indirect,
    Int,
    Literal,
    Load,
    Mod,
    Mul,
    Reduce,
    Store,
    Var,
)
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.values import Lazy, Stored, numel, probe_index

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering

Range = tuple[int, int]

# How many pointwise buffers deep a load is followed (bounds the compile-time work).
MAX_DEPTH = 4


def value_range(ctx: GraphLowering, b: BodyBuilder, name: str, depth: int = 0) -> Range | None:
    """Inclusive bounds of the integer (or bool) value ``name`` of builder ``b``, or None
    when they are not known at compile time."""
    stmt = next((s for s in reversed(b.stmts)
                 if not isinstance(s, Store) and s.name == name), None)
    if stmt is None:
        return None
    if stmt.dtype == torch.bool:
        return (0, 1)
    if stmt.dtype.is_floating_point:
        return None
    if isinstance(stmt, Literal):
        return (int(stmt.value), int(stmt.value))
    if isinstance(stmt, IndexValue):
        return index_range(ctx, b, stmt.index, depth)
    if isinstance(stmt, Load):
        r = buffer_range(ctx, stmt.buffer, depth)
        if r is not None and stmt.mask is not None:  # `other` where the mask is false
            r = (min(r[0], int(stmt.other)), max(r[1], int(stmt.other)))
        return r
    # a value stored in this kernel and forwarded to its reader (argmax + gather)
    for s in b.stmts:
        if isinstance(s, Store) and s.value == name and s.mode == "store" and s.mask is None:
            stored = buffer_range(ctx, s.buffer, depth)
            if stored is not None:
                return stored
    if isinstance(stmt, Reduce):
        return None
    assert isinstance(stmt, Compute)
    args = [value_range(ctx, b, a, depth) for a in stmt.args]
    return _compute_range(stmt, args, b)


def _compute_range(stmt: Compute, args: list[Range | None], b: BodyBuilder) -> Range | None:
    op = stmt.op
    if op == "cast":
        src = b.dtype(stmt.args[0])
        if args[0] is None or src.is_floating_point:
            return None
        info = torch.iinfo(stmt.dtype)
        lo, hi = args[0]
        return (lo, hi) if info.min <= lo and hi <= info.max else None
    if op == "where":
        x, y = args[1], args[2]
        return None if x is None or y is None else (min(x[0], y[0]), max(x[1], y[1]))
    if any(a is None for a in args):
        return None
    rs = [a for a in args if a is not None]
    if op in ("add", "sub", "mul", "maximum", "minimum"):
        (a0, a1), (b0, b1) = rs
        if op == "add":
            return _fits(stmt.dtype, a0 + b0, a1 + b1)
        if op == "sub":
            return _fits(stmt.dtype, a0 - b1, a1 - b0)
        if op == "mul":
            corners = [a0 * b0, a0 * b1, a1 * b0, a1 * b1]
            return _fits(stmt.dtype, min(corners), max(corners))
        if op == "maximum":
            return (max(a0, b0), max(a1, b1))
        return (min(a0, b0), min(a1, b1))
    if op == "neg":
        return _fits(stmt.dtype, -rs[0][1], -rs[0][0])
    if op in ("floordiv", "remainder") and rs[1][0] == rs[1][1] and rs[1][0] > 0:
        d = rs[1][0]
        if op == "floordiv":
            return (rs[0][0] // d, rs[0][1] // d)
        return (0, d - 1)
    return None


def _fits(dtype: torch.dtype, lo: int, hi: int) -> Range | None:
    info = torch.iinfo(dtype)
    return (lo, hi) if info.min <= lo and hi <= info.max else None


def index_range(ctx: GraphLowering, b: BodyBuilder, x: IndexExpr, depth: int = 0) -> Range | None:
    """Inclusive bounds of the index expression ``x`` (loop variables over their sizes)."""
    if isinstance(x, Var):
        return (0, x.size - 1) if isinstance(x.size, int) else None  # symbolic: unknown
    if isinstance(x, Int):
        return (x.value, x.value)
    if isinstance(x, Indirect):
        return value_range(ctx, b, x.value, depth)
    if isinstance(x, Add):
        lo = hi = 0
        for t in x.terms:
            r = index_range(ctx, b, t, depth)
            if r is None:
                return None
            lo, hi = lo + r[0], hi + r[1]
        return (lo, hi)
    if isinstance(x, Mul):
        acc: Range = (1, 1)
        for f in x.factors:
            r = index_range(ctx, b, f, depth)
            if r is None:
                return None
            corners = [acc[0] * r[0], acc[0] * r[1], acc[1] * r[0], acc[1] * r[1]]
            acc = (min(corners), max(corners))
        return acc
    if isinstance(x, (FloorDiv, Mod)):
        d = x.divisor
        r = index_range(ctx, b, x.expr, depth)
        if r is None or not isinstance(d, int):  # a symbolic divisor: unknown
            return None
        if isinstance(x, FloorDiv):
            return (r[0] // d, r[1] // d)
        return None if r[0] < 0 else (0, d - 1)
    return None


def buffer_range(ctx: GraphLowering, buffer: str, depth: int = 0) -> Range | None:
    """Inclusive bounds of every element of ``buffer``, when known at compile time."""
    # NOTE: imported here: ember.inductor.buffers imports the lowering package
    from ember.inductor.buffers import PointwiseBuffer, ReductionBuffer

    if buffer in ctx.constants:
        t = ctx.program.tensors.get(ctx.constants[buffer])
        if not isinstance(t, torch.Tensor) or t.numel() == 0 or t.is_floating_point() \
                or t.is_complex():
            return None
        return (int(t.min()), int(t.max()))
    writers = [n for n in ctx.nodes if getattr(n, "name", None) == buffer]
    if len(writers) != 1:  # a scatter writes again into the buffer it initialized
        return None
    node = writers[0]
    if isinstance(node, ReductionBuffer) and node.op in ("argmax", "argmin"):
        n = numel(node.reduction_sizes)
        return (0, max(n - 1, 0)) if isinstance(n, int) else None  # symbolic: unknown
    if isinstance(node, PointwiseBuffer) and depth < MAX_DEPTH:
        pb = BodyBuilder()
        value = node.fn(pb, probe_index(node.sizes))
        return value_range(ctx, pb, value, depth + 1)
    return None


def tensor_range(ctx: GraphLowering, value: object) -> Range | None:
    """Inclusive bounds of every element of a lowering value (a ``Stored`` or ``Lazy``
    tensor, or a Python number), when known at compile time."""
    if isinstance(value, bool):
        return (int(value), int(value))
    if isinstance(value, int):
        return (value, value)
    if not isinstance(value, (Stored, Lazy)):
        return None
    b = BodyBuilder()
    return value_range(ctx, b, value.element(b, probe_index(value.sizes)))
