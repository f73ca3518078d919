"""Lowering rules for reductions and the normalizations built from them.

Each reduction becomes a :class:`~ember.inductor.buffers.ReductionBuffer` (through
``ctx.reduction``); the arithmetic around it (mean's division, var's second pass,
softmax's exp and division) stays :class:`Lazy`, so the scheduler can put the whole
normalization into one kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from ember.inductor.loop_ir import IndexExpr, Int, floordiv
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.common import cast_to, compute_dtype, normalize_dim, out_meta
from ember.inductor.lowering.registry import NotLowerable, lowering
from ember.inductor.lowering.values import ElementFn, Lazy, Stored, TensorValue, numel
from ember.runtime.ir import Node


def reduced_dims(x: TensorValue, dims: Any) -> tuple[int, ...]:
    """Normalized, sorted reduced dims; ``None``/``[]`` means all dims. A 0-d tensor
    has no dims to reduce (torch accepts dim 0 and -1 for it): ``()``."""
    n = len(x.sizes)
    if dims is None or (isinstance(dims, (tuple, list)) and len(dims) == 0):
        return tuple(range(n))
    if isinstance(dims, int):
        dims = (dims,)
    normalized = {normalize_dim(d, n) for d in dims}
    return tuple(sorted(normalized)) if n else ()


# What a reduction gives over no elements (a reduced dim of size 0). eager raises for
# max/min/argmax/argmin there; their entries only serve normalizations (softmax) whose
# own result is then empty.
EMPTY_REDUCTION: dict[str, float | bool] = {
    "sum": 0, "prod": 1, "any": False, "all": True,
    "max": float("-inf"), "min": float("inf"), "argmax": 0, "argmin": 0, "m2": 0,
}


def reduce(ctx: Any, node: Node, op: str, fn: ElementFn, full_sizes: Sequence[int],
           dims: Sequence[int], keepdim: bool, dtype: torch.dtype) -> TensorValue:
    """``op`` over ``dims`` of ``fn`` (``ctx.reduction``), with the edge shapes as plain
    values: over no dims (a 0-d input) each element alone; over no elements the value of
    :data:`EMPTY_REDUCTION`, and an empty result is never computed."""
    full, dims = tuple(full_sizes), tuple(dims)
    if keepdim:
        sizes = tuple(1 if d in dims else s for d, s in enumerate(full))
    else:
        sizes = tuple(s for d, s in enumerate(full) if d not in dims)
    if numel(full) == 0:
        empty = EMPTY_REDUCTION[op]
        if not dtype.is_floating_point and isinstance(empty, float):
            empty = 0
        return Lazy(lambda b, i: b.literal(empty, dtype), dtype, sizes)
    if not dims:
        def alone(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
            if op in ("argmax", "argmin"):
                return b.literal(0, dtype)
            if op == "m2":  # one element's deviation: 0 (NaN for a NaN or an infinity)
                v = b.cast(fn(b, index), dtype)
                dev = b.compute("sub", v, v)
                return b.compute("mul", dev, dev)
            return b.cast(fn(b, index), dtype)

        return Lazy(alone, dtype, sizes)
    r: Stored = ctx.reduction(node, op, fn, full, dims, keepdim, dtype)
    return r


def keepdim_value(ctx: Any, r: TensorValue, full: Sequence[int], dims: Sequence[int],
                  keepdim: bool) -> Lazy:
    """A reduction result read back broadcast over the full iteration space."""
    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        if keepdim:
            ri = tuple(Int(0) if d in dims else i for d, i in enumerate(index))
        else:
            ri = tuple(i for d, i in enumerate(index) if d not in dims)
        return r.element(b, ri)

    return Lazy(fn, r.dtype, tuple(1 if d in dims else s for d, s in enumerate(full)))


def _cast_fn(x: TensorValue, dtype: torch.dtype) -> Any:
    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        return b.cast(x.element(b, index), dtype)
    return fn


def _sum_like(ctx: Any, node: Node, op: str, x: TensorValue, dims: Any, keepdim: bool) -> Any:
    meta = out_meta(node)
    d = reduced_dims(x, dims)
    acc = compute_dtype(meta.dtype)
    return cast_to(reduce(ctx, node, op, _cast_fn(x, acc), x.sizes, d, keepdim, acc),
                   meta.dtype)


@lowering("aten::sum.dim_IntList", "aten::sum.default")
def _sum(ctx: Any, node: Node, x: TensorValue, dims: Any = None, keepdim: bool = False,
         *, dtype: Any = None) -> Any:
    if node.target == "aten::sum.default":
        dims, keepdim = None, False
    return _sum_like(ctx, node, "sum", x, dims, keepdim)


@lowering("aten::prod.dim_int", "aten::prod.default")
def _prod(ctx: Any, node: Node, x: TensorValue, dim: Any = None, keepdim: bool = False,
          *, dtype: Any = None) -> Any:
    if node.target == "aten::prod.default":
        dim, keepdim = None, False
    return _sum_like(ctx, node, "prod", x, dim, keepdim)


@lowering("aten::mean.dim", "aten::mean.default")
def _mean(ctx: Any, node: Node, x: TensorValue, dims: Any = None, keepdim: bool = False,
          *, dtype: Any = None) -> Any:
    if node.target == "aten::mean.default":
        dims, keepdim = None, False
    meta = out_meta(node)
    d = reduced_dims(x, dims)
    acc = compute_dtype(meta.dtype)
    n = numel([x.sizes[i] for i in d])
    r = reduce(ctx, node, "sum", _cast_fn(x, acc), x.sizes, d, keepdim, acc)

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        return b.cast(b.compute("truediv", r.element(b, index), b.literal(n, acc)), meta.dtype)

    return Lazy(fn, meta.dtype, r.sizes)


@lowering("aten::amax.default", "aten::amin.default")
def _amax(ctx: Any, node: Node, x: TensorValue, dims: Any = (), keepdim: bool = False) -> Any:
    op = "max" if "amax" in node.target else "min"
    meta = out_meta(node)
    d = reduced_dims(x, dims)
    acc = compute_dtype(meta.dtype)
    r = reduce(ctx, node, op, _cast_fn(x, acc), x.sizes, d, keepdim, meta.dtype)
    return r


@lowering("aten::max.default", "aten::min.default")
def _max_all(ctx: Any, node: Node, x: TensorValue) -> Any:
    op = "max" if "max" in node.target else "min"
    d = reduced_dims(x, None)
    acc = compute_dtype(x.dtype)
    return reduce(ctx, node, op, _cast_fn(x, acc), x.sizes, d, False, x.dtype)


@lowering("aten::argmax.default", "aten::argmin.default")
def _argmax(ctx: Any, node: Node, x: TensorValue, dim: Any = None, keepdim: bool = False) -> Any:
    op = "argmax" if "argmax" in node.target else "argmin"
    if x.dtype == torch.bool:
        raise NotLowerable(f"{op} of bool (eager's call raises)")
    d = reduced_dims(x, dim)
    if dim is None:
        keepdim_ = keepdim
        r = reduce(ctx, node, op, _cast_fn(x, compute_dtype(x.dtype)), x.sizes, d, False,
                          torch.int64)
        if keepdim_:
            from ember.inductor.lowering.views import reshape

            return reshape(r, tuple(1 for _ in x.sizes))
        return r
    return reduce(ctx, node, op, _cast_fn(x, compute_dtype(x.dtype)), x.sizes, d, keepdim,
                         torch.int64)


@lowering("aten::max.dim", "aten::min.dim")
def _max_dim(ctx: Any, node: Node, x: TensorValue, dim: int, keepdim: bool = False) -> Any:
    is_max = "max" in node.target
    d = reduced_dims(x, dim)
    acc = compute_dtype(x.dtype)
    values = reduce(ctx, node, "max" if is_max else "min", _cast_fn(x, acc), x.sizes, d,
                           keepdim, x.dtype)
    indices = reduce(ctx, node, "argmax" if is_max else "argmin", _cast_fn(x, acc), x.sizes,
                            d, keepdim, torch.int64)
    return (values, indices)


@lowering("aten::any.default", "aten::any.dim", "aten::any.dims", "aten::all.default",
          "aten::all.dim", "aten::all.dims")
def _any_all(ctx: Any, node: Node, x: TensorValue, dims: Any = None,
             keepdim: bool = False) -> Any:
    op = "any" if "any" in node.target else "all"
    if node.target.endswith(".default"):
        dims, keepdim = None, False
    d = reduced_dims(x, dims)

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        v = x.element(b, index)
        if b.dtype(v) == torch.bool:
            return v
        v = b.cast(v, compute_dtype(b.dtype(v)))
        return b.compute("ne", v, b.literal(0, b.dtype(v)))

    r = reduce(ctx, node, op, fn, x.sizes, d, keepdim, torch.bool)
    return cast_to(r, out_meta(node).dtype)  # any/all of uint8 return uint8


#: device type -> how its variances reduce: "two_pass" (the mean first, then the sum of
#: squared deviations from it: two passes over the input, each a vectorized sum on a CPU,
#: whose rows mostly stay in cache) or "m2" (the loop IR's one-pass ``m2`` reduction
#: beside the sum: a GPU's batch-norm statistics read the input once where two passes
#: read it twice, and split into partial reductions like a sum)
VARIANCE_FORMS: dict[str, str] = {"cpu": "two_pass", "cuda": "m2"}

#: rows of at most this many elements reduce in two passes on every device: a GPU's
#: persistent reductions hold such a row in registers (Triton's
#: ``heuristics.PERSISTENT_MAX``), so the second pass reads no memory and the ``m2``
#: would only add reductions (a layer norm's rows)
TWO_PASS_ROWS = 4096


def variance(ctx: Any, node: Node, x: TensorValue, d: tuple[int, ...], correction: float,
             keepdim: bool, acc: torch.dtype) -> tuple[Any, Any]:
    """(var, mean) as values over the reduced shape, in ``acc``, in the device's form
    (:data:`VARIANCE_FORMS`; rows of up to :data:`TWO_PASS_ROWS` elements: two passes)."""
    n = numel([x.sizes[i] for i in d])
    s = reduce(ctx, node, "sum", _cast_fn(x, acc), x.sizes, d, True, acc)
    one_pass = not (isinstance(n, int) and n <= TWO_PASS_ROWS)
    if VARIANCE_FORMS.get(ctx.device.type) == "m2" and acc.is_floating_point and one_pass:
        s2 = reduce(ctx, node, "m2", _cast_fn(x, acc), x.sizes, d, keepdim, acc)
    else:
        mean_full = keepdim_value(ctx, s, x.sizes, d, True)

        def centered_sq(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
            m = b.compute("truediv", mean_full.element(b, _zero(index, d)),
                          b.literal(n, acc))
            c = b.compute("sub", b.cast(x.element(b, index), acc), m)
            return b.compute("mul", c, c)

        s2 = reduce(ctx, node, "sum", centered_sq, x.sizes, d, keepdim, acc)
    out_sizes = s2.sizes

    def var_fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        if isinstance(n, int):
            denom = b.literal(max(n - correction, 0), acc)
        else:  # a run-time count: max(n - correction, 0) in the kernel
            denom = b.compute("maximum", b.compute("sub", b.literal(n, acc),
                                                   b.literal(correction, acc)),
                              b.literal(0, acc))
        return b.compute("truediv", s2.element(b, index), denom)

    def mean_fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        if keepdim:
            full = index
        else:
            it = iter(index)
            full = tuple(Int(0) if k in d else next(it) for k in range(len(x.sizes)))
        return b.compute("truediv", s.element(b, full), b.literal(n, acc))

    return Lazy(var_fn, acc, out_sizes), Lazy(mean_fn, acc, out_sizes)


def _zero(index: tuple[IndexExpr, ...], d: Sequence[int]) -> tuple[IndexExpr, ...]:
    return tuple(Int(0) if k in d else i for k, i in enumerate(index))


@lowering("aten::var.correction", "aten::std.correction", "aten::var_mean.correction")
def _var(ctx: Any, node: Node, x: TensorValue, dims: Any = None, *, correction: Any = None,
         keepdim: bool = False) -> Any:
    corr = 1.0 if correction is None else float(correction)
    meta = out_meta(node, 0 if isinstance(node.meta, tuple) else None)
    if not meta.dtype.is_floating_point:
        raise NotLowerable("var of a non-float tensor")
    d = reduced_dims(x, dims)
    acc = compute_dtype(meta.dtype)
    var, mean = variance(ctx, node, x, d, corr, keepdim, acc)
    out = meta.dtype

    def cast(v: Lazy, sqrt: bool = False) -> Lazy:
        def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
            e = v.element(b, i)
            return b.cast(b.compute("sqrt", e) if sqrt else e, out)
        return Lazy(fn, out, v.sizes)

    if "var_mean" in node.target:
        return (cast(var), cast(mean))
    return cast(var, sqrt="std" in node.target)


@lowering("aten::logsumexp.default")
def _logsumexp(ctx: Any, node: Node, x: TensorValue, dims: Any, keepdim: bool = False) -> Lazy:
    """``log(sum(exp(x - m))) + m`` with ``m`` the max over ``dims``, taken as 0 where it
    is infinite (all ``-inf`` gives ``-inf``, an ``inf`` gives ``inf``, as in eager)."""
    out = out_meta(node).dtype
    acc = compute_dtype(out)
    if not acc.is_floating_point:
        raise NotLowerable("logsumexp with an integer result")
    d = reduced_dims(x, dims)
    xf = _cast_fn(x, acc)
    m = keepdim_value(ctx, reduce(ctx, node, "max", xf, x.sizes, d, True, acc), x.sizes, d,
                      True)

    def shift(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        v = m.element(b, _zero(index, d))
        return b.compute("where", b.compute("isinf", v), b.literal(0, acc), v)

    def exp_fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        return b.compute("exp", b.compute("sub", xf(b, index), shift(b, index)))

    s = reduce(ctx, node, "sum", exp_fn, x.sizes, d, keepdim, acc)

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        it = iter(index)
        full = index if keepdim else tuple(
            Int(0) if k in d else next(it) for k in range(len(x.sizes)))
        lse = b.compute("add", b.compute("log", s.element(b, index)), shift(b, full))
        return b.cast(lse, out)

    return Lazy(fn, out, s.sizes)


class _SoftmaxParts(NamedTuple):
    """What softmax-like ops share over dim ``d``: the output dtype, the accumulation
    dtype, ``x - rowmax`` (Lazy), the row max and the row sum of ``exp(x - rowmax)``
    (both broadcast back over ``d``)."""

    out: torch.dtype
    acc: torch.dtype
    shifted: Lazy
    row_max: Lazy
    row_sum: Lazy
    d: tuple[int, ...]


def _softmax_parts(ctx: Any, node: Node, x: TensorValue, dim: int, what: str) -> _SoftmaxParts:
    out = out_meta(node).dtype
    acc = compute_dtype(out)
    if not acc.is_floating_point:
        raise NotLowerable(f"{what} of integers")
    d = reduced_dims(x, dim)
    xf = _cast_fn(x, acc)
    m = reduce(ctx, node, "max", xf, x.sizes, d, True, acc)
    m_full = keepdim_value(ctx, m, x.sizes, d, True)

    def shifted(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        return b.compute("sub", xf(b, index), m_full.element(b, _zero(index, d)))

    def exp_fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        return b.compute("exp", shifted(b, index))

    s = reduce(ctx, node, "sum", exp_fn, x.sizes, d, True, acc)
    s_full = keepdim_value(ctx, s, x.sizes, d, True)
    return _SoftmaxParts(out, acc, Lazy(shifted, acc, x.sizes), m_full, s_full, d)


@lowering("aten::_softmax.default")
def _softmax(ctx: Any, node: Node, x: TensorValue, dim: int, half_to_float: Any = False) -> Lazy:
    p = _softmax_parts(ctx, node, x, dim, "softmax")

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        e = b.compute("exp", p.shifted.element(b, index))
        return b.cast(b.compute("truediv", e, p.row_sum.element(b, _zero(index, p.d))), p.out)

    return Lazy(fn, p.out, x.sizes)


@lowering("aten::_log_softmax.default")
def _log_softmax(ctx: Any, node: Node, x: TensorValue, dim: int,
                 half_to_float: Any = False) -> Lazy:
    p = _softmax_parts(ctx, node, x, dim, "log_softmax")

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        lse = b.compute("log", p.row_sum.element(b, _zero(index, p.d)))
        return b.cast(b.compute("sub", p.shifted.element(b, index), lse), p.out)

    return Lazy(fn, p.out, x.sizes)


def _affine(b: BodyBuilder, v: str, w: Any, bias: Any, index: tuple[IndexExpr, ...],
            acc: torch.dtype) -> str:
    from ember.inductor.lowering.common import element

    if w is not None:
        v = b.compute("mul", v, element(b, w, index, acc))
    if bias is not None:
        v = b.compute("add", v, element(b, bias, index, acc))
    return v


@lowering("aten::native_layer_norm.default")
def _layer_norm(ctx: Any, node: Node, x: TensorValue, normalized_shape: Any, w: Any,
                bias: Any, eps: float) -> tuple[Any, Any, Any]:
    meta = out_meta(node, 0)
    acc = compute_dtype(meta.dtype)
    k = len(tuple(normalized_shape))
    n_dims = len(x.sizes)
    d = tuple(range(n_dims - k, n_dims))
    var, mean = variance(ctx, node, x, d, 0.0, True, acc)

    def rstd_fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        return b.compute("rsqrt", b.compute("add", var.element(b, index), b.literal(eps, acc)))

    rstd = Lazy(rstd_fn, acc, var.sizes)

    def out_fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        zi = _zero(index, d)
        c = b.compute("sub", b.cast(x.element(b, index), acc), mean.element(b, zi))
        v = b.compute("mul", c, rstd.element(b, zi))
        return b.cast(_affine(b, v, w, bias, index, acc), meta.dtype)

    stat_dtype = out_meta(node, 1).dtype

    def cast(v: Lazy) -> Lazy:
        return Lazy(lambda b, i: b.cast(v.element(b, i), stat_dtype), stat_dtype, v.sizes)

    return (Lazy(out_fn, meta.dtype, x.sizes), cast(mean), cast(rstd))


@lowering("aten::native_group_norm.default")
def _group_norm(ctx: Any, node: Node, x: TensorValue, w: Any, bias: Any, n: Any, c: Any,
                hw: Any, group: int, eps: float) -> tuple[Any, Any, Any]:
    """Statistics over each group of ``C // group`` channels and every spatial position
    (``x`` viewed ``[N, group, C // group * HxW]``; mean and rstd ``[N, group]``), the
    affine per channel."""
    from ember.inductor.lowering.common import element
    from ember.inductor.lowering.views import reshape

    meta = out_meta(node, 0)
    acc = compute_dtype(meta.dtype)
    channels = x.sizes[1]
    if not acc.is_floating_point or not isinstance(channels, int) or channels % group:
        raise NotLowerable(f"group norm of {channels} channels in {group} groups")
    per_group = channels // group
    rows = reshape(x, (x.sizes[0], group, per_group * numel(x.sizes[2:])))
    var, mean = variance(ctx, node, rows, (2,), 0.0, False, acc)

    def rstd_fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        return b.compute("rsqrt", b.compute("add", var.element(b, index), b.literal(eps, acc)))

    rstd = Lazy(rstd_fn, acc, var.sizes)

    def out_fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        stat = (index[0], floordiv(index[1], per_group))
        v = b.compute("sub", b.cast(x.element(b, index), acc), mean.element(b, stat))
        v = b.compute("mul", v, rstd.element(b, stat))
        if w is not None:
            v = b.compute("mul", v, element(b, w, index[1:2], acc))
        if bias is not None:
            v = b.compute("add", v, element(b, bias, index[1:2], acc))
        return b.cast(v, meta.dtype)

    stat_dtype = out_meta(node, 1).dtype

    def cast(v: Lazy) -> Lazy:
        return Lazy(lambda b, i: b.cast(v.element(b, i), stat_dtype), stat_dtype, v.sizes)

    return (Lazy(out_fn, meta.dtype, x.sizes), cast(mean), cast(rstd))


@lowering("aten::_fused_rms_norm.default")
def _rms_norm(ctx: Any, node: Node, x: TensorValue, normalized_shape: Any, w: Any = None,
              eps: Any = None) -> Any:
    meta = out_meta(node, 0 if isinstance(node.meta, tuple) else None)
    acc = compute_dtype(meta.dtype)
    k = len(tuple(normalized_shape))
    n_dims = len(x.sizes)
    d = tuple(range(n_dims - k, n_dims))
    n = numel([x.sizes[i] for i in d])
    eps_v = torch.finfo(acc).eps if eps is None else float(eps)

    def sq(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        v = b.cast(x.element(b, index), acc)
        return b.compute("mul", v, v)

    ss = reduce(ctx, node, "sum", sq, x.sizes, d, True, acc)

    def rstd_at(b: BodyBuilder, zi: tuple[IndexExpr, ...]) -> str:
        ms = b.compute("truediv", ss.element(b, zi), b.literal(n, acc))
        return b.compute("rsqrt", b.compute("add", ms, b.literal(eps_v, acc)))

    def out_fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        v = b.compute("mul", b.cast(x.element(b, index), acc), rstd_at(b, _zero(index, d)))
        return b.cast(_affine(b, v, w, None, index, acc), meta.dtype)

    out = Lazy(out_fn, meta.dtype, x.sizes)
    if isinstance(node.meta, tuple):
        rstd_dtype = out_meta(node, 1).dtype
        return (out, Lazy(lambda b, i: b.cast(rstd_at(b, i), rstd_dtype), rstd_dtype, ss.sizes))
    return out


@lowering("aten::_safe_softmax.default")
def _safe_softmax(ctx: Any, node: Node, x: TensorValue, dim: int, dtype: Any = None) -> Lazy:
    """softmax, except that a row of all -inf gives zeros instead of NaN."""
    p = _softmax_parts(ctx, node, x, dim, "softmax")

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        e = b.compute("exp", p.shifted.element(b, index))
        row = _zero(index, p.d)
        q = b.compute("truediv", e, p.row_sum.element(b, row))
        dead = b.compute("eq", p.row_max.element(b, row), b.literal(float("-inf"), p.acc))
        return b.cast(b.compute("where", dead, b.literal(0, p.acc), q), p.out)

    return Lazy(fn, p.out, x.sizes)
