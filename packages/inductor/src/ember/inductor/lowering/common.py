"""Helpers shared by the lowering rules: broadcasting, type promotion, pointwise builds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import sympy
import torch
from ember.inductor.loop_ir import IndexExpr, Int, Size
from ember.inductor.loop_ir.symbolic_index import from_ir
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.registry import NotLowerable
from ember.inductor.lowering.values import Lazy, ScalarValue, Stored, TensorValue
from ember.runtime.ir import Node, TensorMeta

LOWP = (torch.float16, torch.bfloat16)
SUPPORTED_DTYPES = (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool,
)


def out_meta(node: Node, i: int | None = None) -> TensorMeta:
    """The tensor metadata of ``node``'s result (``i``-th for several)."""
    meta = node.meta
    if isinstance(meta, tuple):
        meta = meta[0 if i is None else i]
    if not isinstance(meta, TensorMeta):
        raise NotLowerable(f"{node.name}: result is not a tensor")
    if meta.dtype not in SUPPORTED_DTYPES:
        raise NotLowerable(f"{node.name}: dtype {meta.dtype}")
    return meta


def sizes_of(node: Node, i: int | None = None) -> tuple[Size, ...]:
    """The sizes of ``node``'s result (``i``-th for several): ints, or sympy expressions
    over the graph's size symbols."""
    return tuple(from_ir(s) for s in out_meta(node, i).sizes)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype arithmetic runs in: float32 for float16/bfloat16."""
    return torch.float32 if dtype in LOWP else dtype


def is_tensor(x: object) -> bool:
    return isinstance(x, (Stored, Lazy))


def promote(*args: object) -> torch.dtype:
    """torch's result dtype for ``args`` (tensors and Python scalars)."""
    reps: list[object] = []
    for a in args:
        if isinstance(a, (Stored, Lazy)):
            if a.dtype not in SUPPORTED_DTYPES:
                raise NotLowerable(f"dtype {a.dtype}")
            shape = (1,) if a.sizes else ()
            reps.append(torch.empty(shape, dtype=a.dtype, device="meta"))
        elif isinstance(a, (bool, int, float)):
            reps.append(a)
        elif isinstance(a, sympy.Basic):
            reps.append(1)  # a symbolic int (a size expression): promotes as an int
        elif isinstance(a, ScalarValue):
            raise NotLowerable("run-time scalar operand")
        elif a is None:
            continue
        else:
            raise NotLowerable(f"operand {a!r}")
    if not reps:
        raise NotLowerable("no operands")
    tensors = [r for r in reps if isinstance(r, torch.Tensor)]
    acc: Any = reps[0]
    for r in reps[1:]:
        dtype = torch.result_type(acc, cast(Any, r))
        dims = any(isinstance(x, torch.Tensor) and x.dim() > 0 for x in (acc, r))
        if isinstance(acc, torch.Tensor) or isinstance(r, torch.Tensor):
            acc = torch.empty((1,) if dims else (), dtype=dtype, device="meta")
        else:
            acc = r if isinstance(r, float) else acc
    if isinstance(acc, torch.Tensor):
        return acc.dtype
    if not tensors:
        return torch.result_type(torch.tensor(acc), torch.tensor(acc))
    return tensors[0].dtype


def broadcast_index(
    value_sizes: Sequence[int], out_index: Sequence[IndexExpr]
) -> tuple[IndexExpr, ...]:
    """The index into a tensor of ``value_sizes`` broadcast to ``len(out_index)`` dims."""
    k = len(value_sizes)
    tail = out_index[len(out_index) - k:] if k else ()
    return tuple(Int(0) if s == 1 else i for s, i in zip(value_sizes, tail))


def element(
    b: BodyBuilder, x: object, index: Sequence[IndexExpr], dtype: torch.dtype
) -> str:
    """The value of ``x`` (a tensor broadcast to ``index``, or a Python scalar) as
    ``dtype``."""
    if isinstance(x, (Stored, Lazy)):
        v = x.element(b, broadcast_index(x.sizes, index))
        return b.cast(v, dtype)
    if isinstance(x, (bool, int, float, sympy.Basic)):
        return b.literal(x, dtype)  # a sympy size expression is read at run time
    raise NotLowerable(f"operand {x!r}")


def pointwise(
    node: Node,
    args: Sequence[object],
    body: Callable[[BodyBuilder, list[str]], str],
    *,
    compute: torch.dtype,
) -> Lazy:
    """A Lazy of ``node``'s result: each of ``args`` read as ``compute`` at the broadcast
    index, ``body`` applied, the result cast to the node's dtype."""
    meta = out_meta(node)
    out_dtype = meta.dtype
    sizes = tuple(from_ir(s) for s in meta.sizes)

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        vals = [element(b, a, index, compute) for a in args]
        return b.op_result(body(b, vals), out_dtype)

    return Lazy(fn, out_dtype, sizes)


def cast_to(x: TensorValue, dtype: torch.dtype) -> TensorValue:
    """``x`` read as ``dtype`` (``x`` itself when it has that dtype)."""
    if x.dtype == dtype:
        return x
    return Lazy(lambda b, i: b.cast(x.element(b, i), dtype), dtype, x.sizes)


def as_lazy(x: TensorValue) -> Lazy:
    if isinstance(x, Lazy):
        return x
    return Lazy(x.element, x.dtype, x.sizes)


def normalize_dim(d: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= d < n:
        raise NotLowerable(f"dim {d} out of range for {ndim} dims")
    return d % n
