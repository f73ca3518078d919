"""Lowering rules that select elements: cat, constant_pad_nd, flip, gather,
index_select, embedding and advanced indexing (``index.Tensor``). Concatenation and
padding use masked loads; gathers use indirect loads (``Indirect`` index expressions),
their indexes checked at run time like eager's (``_BOUNDS``, :class:`IndexChecker`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sympy
import torch
from ember.inductor.loop_ir import (
    IndexExpr,
    Indirect,
    Int,
    Size,
    add,
    floordiv,
    mod,
    mul,
    render_size,
)
from ember.inductor.loop_ir.symbolic_index import provably_nonnegative
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.checks import RuntimeCheck, new_check, record_failure
from ember.inductor.lowering.common import broadcast_index, normalize_dim, out_meta, sizes_of
from ember.inductor.lowering.registry import NotLowerable, lowering
from ember.inductor.lowering.value_ranges import tensor_range, value_range
from ember.inductor.lowering.values import Lazy, TensorValue, numel
from ember.runtime.ir import Node

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering


def _in_range(b: BodyBuilder, i: IndexExpr, lo: Size, hi: Size) -> str:
    """A bool value: ``lo <= i < hi`` (symbolic bounds: read from the size arguments)."""
    v = b.index_value(i)
    conds = []
    if not isinstance(lo, int) or lo > 0:
        conds.append(b.compute("ge", v, b.literal(lo, torch.int64)))
    conds.append(b.compute("lt", v, b.literal(hi, torch.int64)))
    return b.all_of(*conds)


@lowering("aten::cat.default")
def _cat(ctx: Any, node: Node, tensors: Sequence[Any], dim: int = 0) -> Lazy:
    meta = out_meta(node)
    sizes = sizes_of(node)
    parts = [t for t in tensors if not (len(t.sizes) == 1 and t.sizes[0] == 0)]
    d = normalize_dim(dim, len(sizes))
    offsets: list[Size] = []
    acc: Size = 0
    for t in parts:
        offsets.append(acc)
        acc += t.sizes[d]

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        result: str | None = None
        # Build from the last part backwards: where(in part k, part k, rest)
        for t, off in reversed(list(zip(parts, offsets))):
            src = list(index)
            src[d] = add(index[d], -off)
            if result is None:
                with b.masked(_in_range(b, index[d], off, off + t.sizes[d])):
                    result = b.cast(t.element(b, tuple(src)), meta.dtype)
                continue
            cond = _in_range(b, index[d], off, off + t.sizes[d])
            with b.masked(cond):
                v = b.cast(t.element(b, tuple(src)), meta.dtype)
            result = b.compute("where", cond, v, result)
        assert result is not None
        return result

    if not parts:
        raise NotLowerable("cat of empty tensors")
    return Lazy(fn, meta.dtype, sizes)


def _padded(before: Size, size: Size, out: Size) -> bool:
    """Whether a dim of ``size`` padded by ``before`` into ``out`` has padding (or a
    negative pad's crop) to mask; symbolic: unless no padding is proved."""
    if all(isinstance(v, int) for v in (before, size, out)):
        return before > 0 or before + size < out
    return not (before == 0 and provably_nonnegative(sympy.sympify(size - out)))


@lowering("aten::constant_pad_nd.default")
def _pad(ctx: Any, node: Node, x: TensorValue, pad: Sequence[int], value: Any = 0) -> Lazy:
    meta = out_meta(node)
    sizes = sizes_of(node)
    n = len(sizes)
    # pad lists (before, after) pairs starting from the last dim
    before = [0] * n
    for k in range(len(pad) // 2):
        before[n - 1 - k] = pad[2 * k]

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        src = [add(i, -p) for i, p in zip(index, before)]
        conds = [
            _in_range(b, i, p, p + s)
            for i, p, s, out in zip(index, before, x.sizes, sizes)
            if _padded(p, s, out)
        ]
        if not conds:
            return x.element(b, tuple(src))
        cond = b.all_of(*conds)
        with b.masked(cond):
            v = x.element(b, tuple(src))
        return b.compute("where", cond, v, b.literal(value, meta.dtype))

    return Lazy(fn, meta.dtype, sizes)


@lowering("aten::flip.default")
def _flip(ctx: Any, node: Node, x: TensorValue, dims: Sequence[int]) -> Lazy:
    n = len(x.sizes)
    ds = {normalize_dim(d, n) for d in dims}

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        src = tuple(add(x.sizes[k] - 1, mul(i, -1)) if k in ds else i
                    for k, i in enumerate(index))
        return x.element(b, src)

    return Lazy(fn, x.dtype, x.sizes)


# Bounds checks of the gathering ops (``checks.py``): which indexes eager accepts and the
# exception it raises for the others (CPU). NOTE: eager's index_select raises a
# RuntimeError instead for some dims of some layouts (a 2-d tensor's dim 1); Ember
# raises IndexError for every dim.
#   op                     valid indexes         exception
#   gather                 [0, size)             RuntimeError
#   index_select           [0, size)             IndexError
#   embedding              [0, size)             IndexError
#   index.Tensor (x[idx])  [-size, size)         IndexError
#   take                   [-numel, numel)       IndexError
_BOUNDS: dict[str, tuple[bool, str]] = {  # op -> (negative indexes count from the end, exception)
    "aten::gather.default": (False, "RuntimeError"),
    "aten::index_select.default": (False, "IndexError"),
    "aten::embedding.default": (False, "IndexError"),
    "aten::index.Tensor": (True, "IndexError"),
    "aten::take.default": (True, "IndexError"),
}


def bounds_check(ctx: GraphLowering, op: str, dim: int, size: Size, exception: str
                 ) -> RuntimeCheck:
    """A run-time check that an index of ``op`` lies in dim ``dim`` of ``size``."""
    # a symbolic size is filled in by the wrapper, where its symbols are bound
    text = str(size) if isinstance(size, int) else "{" + render_size(size, "//") + "}"
    return new_check(ctx, exception,
                     f"{op}: index {{value}} is out of bounds for dimension {dim} "
                     f"with size {text}")


def _inside(known: tuple[int, int] | None, lo: Size, hi: Size) -> bool:
    """Whether the range ``known`` lies in ``[lo, hi)`` (never proved for symbolic
    bounds: the check stays)."""
    if not (isinstance(lo, int) and isinstance(hi, int)):
        return False
    return known is not None and lo <= known[0] and known[1] < hi


class IndexChecker:
    """Turns the index values of one op's dim into positions, checking them at run time
    unless their range is known to be valid at compile time (then no code at all)."""

    def __init__(self, ctx: GraphLowering, op: str, dim: int, size: Size,
                 index: TensorValue) -> None:
        self.ctx = ctx
        self.size = size
        self.wrap, exception = _BOUNDS[op]
        known = tensor_range(ctx, index)
        self.check = None if _inside(known, -size if self.wrap else 0, size) else \
            bounds_check(ctx, op, dim, size, exception)

    def position(self, b: BodyBuilder, idx_value: str) -> IndexExpr:
        """The position ``idx_value`` names. Out of range, the kernel records the failed
        check and reads a clamped position (generated code never reads outside its
        buffers); the wrapper then raises."""
        i64 = torch.int64
        size = self.size
        lowest = -size if self.wrap else 0
        known = value_range(self.ctx, b, idx_value)
        v = b.cast(idx_value, i64)
        if _inside(known, 0, size):
            return Indirect(v)
        wrapped = v
        if self.wrap and (known is None or known[0] < 0):
            neg = b.compute("lt", v, b.literal(0, i64))
            wrapped = b.compute("where", neg, b.compute("add", v, b.literal(size, i64)), v)
        if _inside(known, lowest, size):
            return Indirect(wrapped)
        if self.check is not None:
            outside = b.compute("logical_or", b.compute("lt", v, b.literal(lowest, i64)),
                                b.compute("ge", v, b.literal(size, i64)))
            record_failure(b, self.check, outside, v)
        clamped = b.compute("minimum", b.compute("maximum", wrapped, b.literal(0, i64)),
                            b.literal(max(size - 1, 0) if isinstance(size, int)
                                      else sympy.Max(size - 1, 0), i64))
        return Indirect(clamped)


@lowering("aten::gather.default")
def _gather(ctx: GraphLowering, node: Node, x: TensorValue, dim: int, index: TensorValue,
            *, sparse_grad: bool = False) -> Lazy:
    d = normalize_dim(dim, len(x.sizes))
    meta = out_meta(node)
    checker = IndexChecker(ctx, node.target, d, x.sizes[d] if x.sizes else 1, index)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        src = list(i)
        pos = checker.position(b, index.element(b, i))
        if not x.sizes:  # a 0-d tensor: the index must be 0 (or -1)
            return x.element(b, ())
        src[d] = pos
        return x.element(b, tuple(src))

    return Lazy(fn, meta.dtype, sizes_of(node))


@lowering("aten::index_select.default")
def _index_select(ctx: GraphLowering, node: Node, x: TensorValue, dim: int,
                  index: TensorValue) -> Lazy:
    d = normalize_dim(dim, len(x.sizes))
    checker = IndexChecker(ctx, node.target, d, x.sizes[d] if x.sizes else 1, index)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        src = list(i)
        if not x.sizes:  # a 0-d tensor: one index (0-d or of one element), which must be 0
            checker.position(b, index.element(b, tuple(Int(0) for _ in index.sizes)))
            return x.element(b, ())
        k = index.element(b, (i[d],) if index.sizes else ())
        pos = checker.position(b, k)
        src[d] = pos
        return x.element(b, tuple(src))

    return Lazy(fn, x.dtype, sizes_of(node))


@lowering("aten::embedding.default")
def _embedding(ctx: GraphLowering, node: Node, weight: TensorValue, indices: TensorValue,
               *args: Any) -> Lazy:
    k = len(indices.sizes)
    checker = IndexChecker(ctx, node.target, 0, weight.sizes[0], indices)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        row = checker.position(b, indices.element(b, i[:k]))
        return weight.element(b, (row,) + tuple(i[k:]))

    return Lazy(fn, weight.dtype, sizes_of(node))


@lowering("aten::index.Tensor")
def _index(ctx: GraphLowering, node: Node, x: TensorValue, indices: Sequence[Any]) -> Lazy:
    n = len(x.sizes)
    idx = list(indices) + [None] * (n - len(indices))
    present = [k for k, t in enumerate(idx) if t is not None]
    if not present:
        raise NotLowerable("index without tensors")
    if any(t.dtype == torch.bool for t in idx if t is not None):
        raise NotLowerable("boolean mask indexing (data-dependent shape)")
    bshape = broadcast_shape([idx[k].sizes for k in present])
    nb = len(bshape)
    adjacent = present == list(range(present[0], present[-1] + 1))
    first = present[0] if adjacent else 0
    sizes = sizes_of(node)
    checkers = {k: IndexChecker(ctx, node.target, k, x.sizes[k], idx[k]) for k in present}

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        bidx = i[first:first + nb]
        rest = list(i[:first]) + list(i[first + nb:])
        src: list[IndexExpr] = []
        r = iter(rest)
        for k in range(n):
            t = idx[k]
            if t is None:
                src.append(next(r))
            else:
                v = t.element(b, broadcast_index(t.sizes, bidx))
                src.append(checkers[k].position(b, v))
        return x.element(b, tuple(src))

    return Lazy(fn, x.dtype, sizes)


@lowering("aten::take.default")
def _take(ctx: GraphLowering, node: Node, x: TensorValue, index: TensorValue) -> Lazy:
    """``x.flatten()[index]`` (row-major positions, negative ones from the end)."""
    n = numel(x.sizes)
    checker = IndexChecker(ctx, node.target, 0, n, index)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        flat = checker.position(b, index.element(b, i))
        src = [mod(floordiv(flat, numel(x.sizes[d + 1:])), size)
               for d, size in enumerate(x.sizes)]
        return x.element(b, tuple(src))

    if n == 0:
        raise NotLowerable("take from an empty tensor")
    return Lazy(fn, x.dtype, sizes_of(node))


def broadcast_shape(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    n = max(len(s) for s in shapes)
    out = [1] * n
    for s in shapes:
        for k, size in enumerate(s):
            pos = n - len(s) + k
            if size != 1:
                if out[pos] not in (1, size):
                    raise NotLowerable(f"index shapes {shapes} do not broadcast")
                out[pos] = size
    return tuple(out)
