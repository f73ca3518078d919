"""The op table: every op Ember's inductor lowers, as functional torch code with input
makers, run against eager (PyTorch OpInfo style). Used by test_op_table.py.

Each :class:`OpCase` names the ATen op it exercises, the dtypes it applies to, a
function, and the shapes of its tensor inputs; the input domain (``positive``,
``nonzero``, ``index``) picks values where the op is defined.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

aten = torch.ops.aten
F32, F16, BF16, I64, BOOL = torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool
FLOATS = (F32, F16, BF16)
NUMERIC = (F32, F16, BF16, I64)
ALL = (F32, F16, BF16, I64, BOOL)


@dataclass(frozen=True)
class OpCase:
    """One row: ``fn(*inputs)`` for inputs of ``shapes`` (and ``extra`` fixed tensors)."""

    name: str
    fn: Callable[..., Any]
    shapes: tuple[tuple[int, ...], ...] = ((4, 6),)
    dtypes: tuple[torch.dtype, ...] = FLOATS
    domain: str = "any"  # any | positive | nonzero | unit
    extra: Callable[[], tuple[torch.Tensor, ...]] | None = None
    extern: bool = False  # runs as an extern call on purpose (mm, ...)
    tags: tuple[str, ...] = field(default=())


def _idx(*shape: int, high: int = 4) -> Callable[[], tuple[torch.Tensor, ...]]:
    return lambda: (torch.randint(-high, high, shape),)


def _u(name: str, fn: Callable[..., Any], dtypes: tuple[torch.dtype, ...] = FLOATS,
       domain: str = "any") -> OpCase:
    return OpCase(name, fn, ((4, 6),), dtypes, domain)


def _b(name: str, fn: Callable[..., Any], dtypes: tuple[torch.dtype, ...] = NUMERIC,
       domain: str = "any") -> OpCase:
    return OpCase(name, fn, ((4, 6), (6,)), dtypes, domain)


OP_TABLE: list[OpCase] = [
    # -- unary math ---------------------------------------------------------------------
    _u("exp", torch.exp), _u("exp2", torch.exp2), _u("expm1", torch.expm1),
    _u("log", torch.log, domain="positive"), _u("log2", torch.log2, domain="positive"),
    _u("log10", torch.log10, domain="positive"), _u("log1p", torch.log1p, domain="positive"),
    _u("sqrt", torch.sqrt, domain="positive"), _u("rsqrt", torch.rsqrt, domain="positive"),
    _u("sin", torch.sin), _u("cos", torch.cos), _u("tan", torch.tan, domain="unit"),
    _u("asin", torch.asin, domain="unit"), _u("acos", torch.acos, domain="unit"),
    _u("atan", torch.atan), _u("sinh", torch.sinh), _u("cosh", torch.cosh),
    _u("tanh", torch.tanh), _u("asinh", torch.asinh), _u("atanh", torch.atanh, domain="unit"),
    _u("erf", torch.erf), _u("sigmoid", torch.sigmoid),
    _u("erfinv", torch.erfinv, domain="unit"), _u("lgamma", torch.lgamma, dtypes=NUMERIC),
    _u("digamma", torch.digamma, dtypes=NUMERIC),
    _u("polygamma", lambda x: [torch.polygamma(0, x), torch.polygamma(1, x)], dtypes=NUMERIC),
    _u("special_int", lambda x: [torch.erfinv(x), torch.lgamma(x), torch.digamma(x)],
       dtypes=(I64, BOOL)),
    _u("copysign_scalar", lambda x: torch.copysign(x, -1.5), dtypes=NUMERIC),
    _u("reciprocal", torch.reciprocal, domain="nonzero"),
    _u("exp_int", torch.exp, dtypes=(I64, BOOL)),
    _u("abs", torch.abs, dtypes=NUMERIC), _u("neg", torch.neg, dtypes=NUMERIC),
    _u("sign", torch.sign, dtypes=NUMERIC + (BOOL,)),
    _u("floor", torch.floor, dtypes=NUMERIC), _u("ceil", torch.ceil, dtypes=NUMERIC),
    _u("round", torch.round, dtypes=NUMERIC), _u("trunc", torch.trunc, dtypes=NUMERIC),
    _u("relu", torch.relu, dtypes=NUMERIC), _u("gelu", F.gelu),
    _u("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")), _u("silu", F.silu),
    _u("leaky_relu", lambda x: F.leaky_relu(x, 0.2)),
    _u("hardtanh", lambda x: F.hardtanh(x, -0.5, 0.5)),
    _u("elu", lambda x: [F.elu(x), F.elu(x, 0.5), torch.selu(x)]),
    _u("isnan", torch.isnan, dtypes=ALL), _u("isinf", torch.isinf, dtypes=ALL),
    _u("logical_not", torch.logical_not, dtypes=ALL),
    _u("bitwise_not", torch.bitwise_not, dtypes=(I64, BOOL)),
    _u("clamp", lambda x: torch.clamp(x, -0.5, 0.7), dtypes=NUMERIC),
    _u("clamp_min", lambda x: torch.clamp(x, min=0.1), dtypes=NUMERIC),
    _u("pow_scalar", lambda x: torch.pow(x, 3), dtypes=NUMERIC),
    _u("pow_square", lambda x: x ** 2, dtypes=NUMERIC),
    _u("pow_float", lambda x: x ** 1.5, domain="positive"),
    _u("pow_half", lambda x: x ** 0.5, domain="positive"),
    _u("pow_minus_half", lambda x: x ** -0.5, domain="positive"),
    _u("pow_minus_one", lambda x: x ** -1, domain="nonzero"),
    _u("pow_minus_two", lambda x: x ** -2.0, domain="nonzero"),
    _u("scalar_rsub", lambda x: 1 - x, dtypes=NUMERIC),
    _u("mul_scalar", lambda x: x * 3, dtypes=ALL),
    _u("add_scalar_float", lambda x: x + 0.5, dtypes=ALL),
    _u("div_scalar", lambda x: x / 4, dtypes=NUMERIC),
    # -- casts ---------------------------------------------------------------------------
    _u("to_f32", lambda x: x.to(torch.float32), dtypes=ALL),
    _u("to_f16", lambda x: x.to(torch.float16), dtypes=ALL),
    _u("to_bf16", lambda x: x.to(torch.bfloat16), dtypes=ALL),
    _u("to_i64", lambda x: x.to(torch.int64), dtypes=ALL),
    _u("to_bool", lambda x: x.to(torch.bool), dtypes=ALL),
    _u("clone", torch.clone, dtypes=ALL),
    # -- binary --------------------------------------------------------------------------
    _b("add", torch.add, dtypes=ALL), _b("add_alpha", lambda a, b: torch.add(a, b, alpha=2)),
    _b("sub", torch.sub), _b("mul", torch.mul, dtypes=ALL), _b("div", torch.div, domain="nonzero"),
    _b("div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), domain="nonzero"),
    _b("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"), domain="nonzero"),
    _b("remainder", torch.remainder, domain="nonzero"),
    _b("fmod", torch.fmod, domain="nonzero"),
    _b("pow", torch.pow, dtypes=FLOATS, domain="positive"),
    _b("maximum", torch.maximum, dtypes=ALL), _b("minimum", torch.minimum, dtypes=ALL),
    _b("atan2", torch.atan2, dtypes=FLOATS),
    _b("copysign", torch.copysign, dtypes=ALL), _b("hypot", torch.hypot, dtypes=FLOATS),
    _b("logaddexp", lambda a, b: [torch.logaddexp(a, b), torch.logaddexp2(a, b)],
       dtypes=FLOATS),
    _b("nextafter", torch.nextafter, dtypes=(F32,)),  # 16-bit: a fallback (test_math_lowerings)
    _b("eq", torch.eq, dtypes=ALL), _b("ne", torch.ne, dtypes=ALL), _b("lt", torch.lt),
    _b("le", torch.le), _b("gt", torch.gt), _b("ge", torch.ge),
    _b("logical_and", torch.logical_and, dtypes=ALL),
    _b("logical_or", torch.logical_or, dtypes=ALL),
    _b("logical_xor", torch.logical_xor, dtypes=ALL),
    _b("bitwise_and", torch.bitwise_and, dtypes=(I64, BOOL)),
    _b("bitwise_or", torch.bitwise_or, dtypes=(I64, BOOL)),
    _b("bitwise_xor", torch.bitwise_xor, dtypes=(I64, BOOL)),
    OpCase("where", lambda c, a, b: torch.where(c > 0, a, b), ((4, 6), (4, 6), (6,)), ALL),
    OpCase("where_scalar", lambda c, a: torch.where(c > 0, a, 0.5), ((4, 6), (4, 6)), NUMERIC),
    OpCase("mixed_promotion", lambda a, b: a + b.to(torch.int64), ((4, 6), (4, 6)), FLOATS),
    OpCase("chain10", lambda a, b: ((((a * b + 1).sin() * 2 - b).abs() + 1).sqrt().exp() - a)
           .tanh() * 0.5, ((4, 6), (4, 6)), FLOATS),
    # -- reductions ----------------------------------------------------------------------
    _u("sum", lambda x: x.sum(-1), dtypes=ALL), _u("sum_all", torch.sum, dtypes=ALL),
    _u("sum_dim0_keepdim", lambda x: x.sum(0, keepdim=True), dtypes=NUMERIC),
    _u("mean", lambda x: x.mean(-1)), _u("mean_all", torch.mean),
    _u("prod", lambda x: x.prod(-1), dtypes=NUMERIC, domain="unit"),
    _u("amax", lambda x: x.amax(-1), dtypes=NUMERIC + (BOOL,)),
    _u("amin", lambda x: x.amin(0), dtypes=NUMERIC),
    _u("max_dim", lambda x: x.max(-1), dtypes=NUMERIC),
    _u("min_dim", lambda x: x.min(0, keepdim=True), dtypes=NUMERIC),
    _u("max_all", torch.max, dtypes=NUMERIC),
    _u("argmax", lambda x: x.argmax(-1), dtypes=NUMERIC),
    _u("argmin", lambda x: x.argmin(0), dtypes=NUMERIC),
    _u("argmax_all", torch.argmax, dtypes=NUMERIC),
    _u("var", lambda x: x.var(-1)), _u("var_unbiased0", lambda x: x.var(0, correction=0)),
    _u("std", lambda x: x.std(-1, keepdim=True)),
    _u("any", lambda x: x.any(-1), dtypes=ALL), _u("all", lambda x: x.all(0), dtypes=ALL),
    _u("logsumexp", lambda x: [torch.logsumexp(x, -1), torch.logsumexp(x, (0, 1), True),
                               torch.logsumexp(torch.where(x > 0, float("-inf"), x), 0)]),
    _u("softmax", lambda x: torch.softmax(x, -1)),
    _u("softmax_dim0", lambda x: torch.softmax(x, 0)),
    _u("log_softmax", lambda x: torch.log_softmax(x, -1)),
    OpCase("group_norm", lambda x, w, b: [F.group_norm(x, 2, w, b), F.group_norm(x, 4),
                                          F.group_norm(x[:, :, 0], 1, w, None)],
           ((2, 4, 3, 5), (4,), (4,)), FLOATS),
    OpCase("layer_norm", lambda x, w, b: F.layer_norm(x, (6,), w, b), ((4, 6), (6,), (6,)),
           FLOATS),
    OpCase("rms_norm", lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w,
           ((4, 6), (6,)), FLOATS),
    _u("norm_epilogue", lambda x: x.sum(-1).sqrt() * 2 + 1, domain="positive"),
    # -- views ---------------------------------------------------------------------------
    _u("view", lambda x: x.reshape(2, 12) + 1, dtypes=ALL),
    _u("view_flat", lambda x: x.reshape(-1) * 2, dtypes=NUMERIC),
    _u("permute", lambda x: x.permute(1, 0) * 2, dtypes=NUMERIC),
    _u("transpose_view", lambda x: x.t().reshape(24) + 1, dtypes=NUMERIC),
    _u("expand", lambda x: x[:, :1].expand(4, 6) + x, dtypes=NUMERIC),
    _u("repeat", lambda x: [x.repeat(2, 3), (x * 2).repeat(2, 1, 2), x[:, :1].repeat(1, 3)],
       dtypes=ALL),
    _u("slice", lambda x: x[1:3, ::2] * 2, dtypes=ALL),
    _u("select", lambda x: x[2] + 1, dtypes=NUMERIC),
    _u("unsqueeze", lambda x: x.unsqueeze(1) * 2, dtypes=NUMERIC),
    _u("squeeze", lambda x: x[:1].squeeze(0) * 2, dtypes=NUMERIC),
    _u("as_strided", lambda x: torch.as_strided(x * 2, (3, 2), (2, 3), 1) + 1, dtypes=NUMERIC),
    _u("flip", lambda x: x.flip(0) * 1, dtypes=ALL),
    _u("diagonal", lambda x: [x.diagonal() + 1, x.diagonal(2) * 2, x.diagonal(-1, 1, 0) * 1,
                              (x * 2).diagonal(1) + 1], dtypes=NUMERIC),
    _u("cat", lambda x: torch.cat([x, x * 2], 1), dtypes=ALL),
    _u("cat0", lambda x: torch.cat([x[:1], x + 1], 0), dtypes=NUMERIC),
    _u("pad", lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), dtypes=FLOATS),
    _u("pad_int", lambda x: F.pad(x, (2, 0)), dtypes=(I64, BOOL)),
    OpCase("gather", lambda x, i: torch.gather(x, 1, i.abs() % 6), ((4, 6),), NUMERIC,
           extra=lambda: (torch.randint(0, 6, (4, 3)),)),
    OpCase("index", lambda x, i: x[i], ((4, 6),), ALL, extra=_idx(5)),
    OpCase("index_2d", lambda x, i: x[:, i], ((4, 6),), NUMERIC, extra=_idx(3, 2)),
    OpCase("embedding", lambda w, i: F.embedding(i.abs(), w), ((6, 5),), FLOATS,
           extra=lambda: (torch.randint(0, 6, (2, 3)),)),
    OpCase("index_select", lambda x, i: torch.index_select(x, 0, i.abs()), ((4, 6),), NUMERIC,
           extra=lambda: (torch.randint(0, 4, (3,)),)),
    _u("arange_add", lambda x: x + torch.arange(6, dtype=x.dtype), dtypes=NUMERIC),
    _u("full_like", lambda x: torch.full_like(x, 2) + x, dtypes=NUMERIC),
    OpCase("slice_scatter", lambda x, s: torch.slice_scatter(x, s, 1, 1, 5, 2),
           ((4, 6), (4, 2)), ALL),
    OpCase("select_scatter", lambda x, s: torch.select_scatter(x, s, 0, -1), ((4, 6), (6,)),
           ALL),
    OpCase("as_strided_scatter", lambda x, s: [
        aten.as_strided_scatter(x * 1, s, [2, 2], [1, 3], 1),
        aten.as_strided_scatter(x * 1, s.t(), [2, 2], [6, 2], 7)], ((4, 6), (2, 2)), ALL),
    # writes through run-time indexes (distinct positions where the write is a plain
    # store: eager leaves the winner of repeated positions undefined)
    OpCase("index_put", lambda x, v, i: torch.index_put(x, (i,), v), ((4, 6), (3, 6)), ALL,
           extra=lambda: (torch.randperm(4)[:3] - 2,)),
    OpCase("index_put_acc", lambda x, v, i: torch.index_put(x, (i,), v, accumulate=True),
           ((4, 6), (5, 6)), NUMERIC, extra=_idx(5)),
    OpCase("index_put_cols", lambda x, v, i: aten.index_put(x, [None, i], v, accumulate=True),
           ((4, 6), (4, 3)), NUMERIC, extra=_idx(3, high=6)),
    OpCase("index_put_points", lambda x, v, i, j: torch.index_put(x, (i, j), v * 2),
           ((4, 6), (1,)), NUMERIC,
           extra=lambda: (torch.tensor([0, -1, 2]), torch.tensor([[5], [0]]))),
    OpCase("scatter", lambda x, s, i: torch.scatter(x, 1, i, s), ((4, 6), (4, 5)), ALL,
           extra=lambda: (torch.stack([torch.randperm(6)[:3] for _ in range(4)]),)),
    OpCase("scatter_value", lambda x, i: torch.scatter(x, 0, i, 2), ((4, 6),), NUMERIC,
           extra=lambda: (torch.stack([torch.randperm(4)[:2] for _ in range(6)], 1),)),
    OpCase("scatter_add", lambda x, s, i: torch.scatter_add(x, 1, i, s), ((4, 6), (4, 5)),
           NUMERIC, extra=lambda: (torch.randint(0, 6, (4, 5)),)),
    OpCase("scatter_reduce_sum", lambda x, s, i: [
        aten.scatter_reduce.two(x, 0, i, s, "sum"), aten.scatter.reduce(x, 0, i, s, reduce="add"),
        aten.scatter.value_reduce(x, 0, i, 3, reduce="add")],
           ((4, 6), (5, 6)), NUMERIC, extra=lambda: (torch.randint(0, 4, (5, 6)),)),
    OpCase("index_add", lambda x, s, i: torch.index_add(x, 1, i, s, alpha=2),
           ((4, 6), (4, 5)), NUMERIC, extra=lambda: (torch.randint(0, 6, (5,)),)),
    OpCase("max_pool2d", lambda x: list(aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1]))
           + list(aten.max_pool2d_with_indices(x, [2, 2], [2, 2], [0, 0], [1, 1], True))
           + list(aten.max_pool2d_with_indices(x[0], [2, 3], [1, 2], [1, 1], [2, 1])),
           ((2, 3, 9, 10),), FLOATS),
    OpCase("max_pool2d_backward", lambda x: aten.max_pool2d_with_indices_backward(
        (x[:, :, ::2, ::2] * 2).sin(), x, [3, 3], [2, 2], [1, 1], [1, 1], False,
        aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1])[1]), ((2, 3, 9, 10),), FLOATS),
    OpCase("avg_pool2d", lambda x: [aten.avg_pool2d(x, [3, 3], [2, 2], [1, 1]),
                                    aten.avg_pool2d(x, [2, 3], [1, 2], [1, 1], True, False),
                                    aten.avg_pool2d(x, [2, 2], [2, 2], [0, 0], False, True, 3)],
           ((2, 3, 9, 10),), FLOATS),
    OpCase("avg_pool2d_backward", lambda x: [
        aten.avg_pool2d_backward(x[:, :, ::2, ::2].cos(), x, [3, 3], [2, 2], [1, 1], False,
                                 True, None),
        aten.avg_pool2d_backward(F.pad(x[:, :, :, ::2], (0, 1, 0, 1)) * 3, x, [2, 3], [1, 2], [1, 1], True, False,
                                 None)], ((2, 3, 9, 10),), FLOATS),
    OpCase("adaptive_avg_pool2d", lambda x: [aten._adaptive_avg_pool2d(x, [4, 3]),
                                             aten._adaptive_avg_pool2d(x, [9, 10]),
                                             aten._adaptive_avg_pool2d(x[0], [2, 7])],
           ((2, 3, 9, 10),), FLOATS),
    OpCase("adaptive_avg_pool2d_backward", lambda x: [
        aten._adaptive_avg_pool2d_backward(x[:, :, :4, :3].cos(), x),
        aten._adaptive_avg_pool2d_backward(x[0, :, :2, :7] * 3, x[0])], ((2, 3, 9, 10),), FLOATS),
    OpCase("max_pool3d", lambda x: list(aten.max_pool3d_with_indices(x, [3, 3, 3], [2, 2, 2],
                                                                      [1, 1, 1]))
           + list(aten.max_pool3d_with_indices(x[0], [2, 3, 2], [1, 2, 1], [1, 1, 0], [2, 1, 1],
                                               True)), ((2, 3, 5, 6, 7),), FLOATS),
    OpCase("max_pool3d_backward", lambda x: aten.max_pool3d_with_indices_backward(
        (x[:, :, ::2, ::2, ::2] * 2).sin(), x, [3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], False,
        aten.max_pool3d_with_indices(x, [3, 3, 3], [2, 2, 2], [1, 1, 1])[1]),
           ((2, 3, 5, 6, 7),), FLOATS),
    OpCase("avg_pool3d", lambda x: [aten.avg_pool3d(x, [3, 3, 3], [2, 2, 2], [1, 1, 1]),
                                    aten.avg_pool3d(x, [2, 3, 2], [1, 2, 1], [1, 1, 1], True,
                                                    False),
                                    aten.avg_pool3d(x[0], [2, 2, 2], [2, 2, 2], [0, 0, 0], False,
                                                    True, 3)], ((2, 3, 5, 6, 7),), FLOATS),
    OpCase("avg_pool3d_backward", lambda x: [
        aten.avg_pool3d_backward(x[:, :, ::2, ::2, ::2].cos(), x, [3, 3, 3], [2, 2, 2], [1, 1, 1],
                                 False, True, None),
        aten.avg_pool3d_backward(aten.avg_pool3d(x, [2, 3, 2], [1, 2, 1], [1, 1, 1], True,
                                                 False).sin(), x, [2, 3, 2], [1, 2, 1], [1, 1, 1],
                                 True, False, None)], ((2, 3, 5, 6, 7),), FLOATS),
    OpCase("adaptive_avg_pool3d", lambda x: [aten._adaptive_avg_pool3d(x, [2, 3, 4]),
                                             aten._adaptive_avg_pool3d(x[0], [5, 7, 6])],
           ((2, 3, 5, 6, 7),), FLOATS),
    OpCase("adaptive_avg_pool3d_backward", lambda x: [
        aten._adaptive_avg_pool3d_backward(aten._adaptive_avg_pool3d(x, [2, 3, 4]).cos(), x),
        aten._adaptive_avg_pool3d_backward(x[0, :, :3, :4, :2] * 3, x[0])],
           ((2, 3, 5, 6, 7),), FLOATS),
    # stack as the aot stage decomposes it (cat, then a view)
    _u("stack", lambda x: torch.cat([x, x * 2]).view(2, *x.shape), dtypes=ALL),
    _u("unfold", lambda x: [x.unfold(-1, 2, 1) * 2, x.unfold(0, 1, 2) + 1], dtypes=NUMERIC),
    # avg_pool1d as it arrives: unsqueeze, avg_pool2d, squeeze
    OpCase("avg_pool1d", lambda x: [F.avg_pool1d(x, 2), F.avg_pool1d(x, 3, 2, 1)],
           ((2, 3, 9),), FLOATS),
    _u("split", lambda x: [t * 2 for t in torch.split(x, [2, 4], 1)], dtypes=NUMERIC),
    _u("unbind", lambda x: [t + 1 for t in torch.unbind(x, 0)], dtypes=NUMERIC),
    # -- backward ops --------------------------------------------------------------------
    OpCase("threshold_backward", lambda g, x: torch.ops.aten.threshold_backward(g, x, 0.1),
           ((4, 6), (4, 6)), FLOATS),
    OpCase("sigmoid_backward", lambda g, y: torch.ops.aten.sigmoid_backward(g, y.sigmoid()),
           ((4, 6), (4, 6)), FLOATS),
    OpCase("tanh_backward", lambda g, y: torch.ops.aten.tanh_backward(g, y.tanh()),
           ((4, 6), (4, 6)), FLOATS),
    OpCase("softmax_backward", lambda g, y: torch.ops.aten._softmax_backward_data(
        g, torch.softmax(y, -1), -1, y.dtype), ((4, 6), (4, 6)), FLOATS),
    OpCase("log_softmax_backward", lambda g, y: torch.ops.aten._log_softmax_backward_data(
        g, torch.log_softmax(y, 1), 1, y.dtype), ((4, 6), (4, 6)), FLOATS),
    # -- direct calls of the remaining overloads ----------------------------------------
    _u("acosh", lambda x: torch.acosh(x.abs() + 1)), _u("erfc", torch.erfc),
    _u("sgn", torch.sgn, dtypes=NUMERIC),
    _u("safe_softmax", lambda x: aten._safe_softmax(x, -1)),
    _u("add_scalar_op", lambda x: aten.add.Scalar(x, 2), dtypes=NUMERIC),
    _u("sub_scalar_op", lambda x: aten.sub.Scalar(x, 2), dtypes=NUMERIC),
    _u("mul_scalar_op", lambda x: aten.mul.Scalar(x, 3), dtypes=ALL),
    _u("div_scalar_op", lambda x: aten.div.Scalar(x, 3), dtypes=NUMERIC),
    _u("div_scalar_mode", lambda x: aten.div.Scalar_mode(x, 3, rounding_mode="floor"),
       dtypes=NUMERIC),
    _u("fmod_scalar", lambda x: torch.fmod(x, 1.5), dtypes=FLOATS),
    _u("pow_scalar_base", lambda x: torch.pow(2.0, x)),
    _u("compare_scalars", lambda x: [aten.eq.Scalar(x, 1), aten.ne.Scalar(x, 1),
                                     aten.lt.Scalar(x, 0), aten.le.Scalar(x, 0),
                                     aten.ge.Scalar(x, 0), aten.gt.Scalar(x, 0)],
       dtypes=NUMERIC),
    _u("bitwise_scalars", lambda x: [aten.bitwise_and.Scalar(x, 3), aten.bitwise_or.Scalar(
        x, 5), aten.bitwise_xor.Scalar(x, 6)], dtypes=(I64,)),
    _b("shifts", lambda a, b: [aten.bitwise_left_shift.Tensor(a, b.abs() % 8),
                               aten.bitwise_right_shift.Tensor(a, b.abs() % 8)],
       dtypes=(I64,)),
    _b("fmax_fmin", lambda a, b: [torch.fmax(a, b), torch.fmin(a, b)], dtypes=NUMERIC),
    _b("floor_divide", torch.floor_divide, domain="nonzero"),
    _b("rsub_tensor", lambda a, b: aten.rsub.Tensor(a, b, alpha=2)),
    OpCase("clamp_tensor", lambda x, lo, hi: [torch.clamp(x, lo - 1, hi + 1),
                                              aten.clamp_min.Tensor(x, lo),
                                              aten.clamp_max.Tensor(x, hi)],
           ((4, 6), (6,), (4, 6)), NUMERIC),
    _u("clamp_min_max_ops", lambda x: [aten.clamp_min.default(x, 0), aten.clamp_max.default(
        x, 0)], dtypes=NUMERIC),
    _u("reductions_all", lambda x: [torch.all(x), torch.any(x), aten.any.dims(x, [0, 1]),
                                    aten.all.dims(x, [1])], dtypes=ALL),
    _u("min_prod_all", lambda x: [torch.min(x), torch.prod(x)], dtypes=NUMERIC, domain="unit"),
    _u("var_mean", lambda x: list(aten.var_mean.correction(x, [1], correction=0,
                                                           keepdim=True))),
    _u("view_ops", lambda x: [aten.alias.default(x), aten.squeeze.default(x[None]),
                              aten.squeeze.dims(x[None], [0]), aten.transpose.int(x, 0, 1),
                              aten.split.Tensor(x, 4, 1)[1]], dtypes=ALL),
    _u("floor_divide_scalar", lambda x: aten.floor_divide.Scalar(x, 2), dtypes=NUMERIC),
    _u("copy_ops", lambda x: [aten.view_copy.default(x, [24]),
                              aten.permute_copy.default(x, [1, 0]),
                              aten.expand_copy.default(x[:1], [3, 6]),
                              aten.slice_copy.Tensor(x, 1, 1, 5, 2),
                              aten.select_copy.int(x, 0, 1),
                              aten.squeeze_copy.dims(x[None], [0]),
                              aten.unsqueeze_copy.default(x, 1),
                              aten.as_strided_copy.default(x * 1, [2, 2], [1, 2])],
       dtypes=ALL),
    _b("copy", lambda a, b: aten.copy.default(a, b), dtypes=ALL),
    _u("factories", lambda x: [torch.full((4, 6), 2.5) + x, torch.ones(3) * 2,
                               torch.zeros(2, 2) + 1, torch.ones_like(x) + x,
                               torch.zeros_like(x) + x, x.new_ones(3) + 1,
                               x.new_zeros(2) + 1, aten.fill.Scalar(x, 3),
                               aten.fill.Tensor(x, x[0, 0]),
                               x + torch.arange(1, 7, dtype=x.dtype),
                               x + torch.arange(0, 12, 2, dtype=x.dtype)],
       dtypes=NUMERIC),
    _u("lifted_constant", lambda x: x * torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])),
    # -- externs -------------------------------------------------------------------------
    OpCase("mm", lambda a, b: (a @ b).relu(), ((4, 6), (6, 5)), (F32,), extern=True),
    OpCase("addmm", lambda a, b, c: torch.addmm(c, a, b), ((4, 6), (6, 5), (5,)), (F32,),
           extern=True),
    OpCase("bmm", lambda a, b: torch.bmm(a, b) * 2, ((2, 4, 6), (2, 6, 3)), (F32,), extern=True),
    OpCase("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5),
           ((2, 4, 3), (2, 4, 6), (2, 6, 3)), (F32,), extern=True),
    OpCase("conv2d", lambda x, w, b: F.conv2d(x, w, b, padding=1).relu(),
           ((1, 2, 6, 6), (3, 2, 3, 3), (3,)), (F32,), extern=True),
    OpCase("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v) + q,
           ((1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)), (F32,), extern=True),
]


def make_input(shape: tuple[int, ...], dtype: torch.dtype, domain: str, contiguous: bool,
               gen: torch.Generator) -> torch.Tensor:
    """A fresh random input (never zeros); non-contiguous ones are strided views."""
    full = shape[:-1] + (shape[-1] * 2,) if shape else shape
    if dtype == torch.bool:
        t = torch.randint(0, 2, full, generator=gen).bool()
    elif not dtype.is_floating_point:
        t = torch.randint(-7, 8, full, generator=gen)
        if domain in ("nonzero", "positive"):
            t = torch.where(t == 0, torch.ones_like(t), t)
        if domain == "positive":
            t = t.abs()
        if domain == "unit":
            t = t.clamp(-1, 1)
        t = t.to(dtype)
    else:
        t = torch.randn(full, generator=gen)
        if domain == "positive":
            t = t.abs() + 0.1
        elif domain == "nonzero":
            t = torch.where(t.abs() < 0.1, torch.full_like(t, 0.5), t)
        elif domain == "unit":
            t = torch.rand(full, generator=gen) * 1.8 - 0.9
        t = t.to(dtype)
    if not shape:
        return t
    if contiguous:
        return t[..., : shape[-1]].contiguous()
    return t[..., ::2]


def flatten(x: Any) -> list[torch.Tensor]:
    """The tensors of a case's result (a tensor, or nested tuples/lists of them)."""
    if isinstance(x, torch.Tensor):
        return [x]
    return [t for item in x for t in flatten(item)]


class Batch:
    """Several cases as one traced function (one compile for a whole batch of the table):
    ``fn(*all inputs) -> all results``; :meth:`split` gives each case its results."""

    def __init__(self, cases: list[OpCase], inputs: dict[str, list[torch.Tensor]]) -> None:
        self.cases = cases
        self.inputs = [x for c in cases for x in inputs[c.name]]
        self._arity = [len(inputs[c.name]) for c in cases]
        self._counts: list[int] = []

    def fn(self, *xs: torch.Tensor) -> list[torch.Tensor]:
        outs: list[torch.Tensor] = []
        self._counts.clear()
        i = 0
        for c, n in zip(self.cases, self._arity):
            r = flatten(c.fn(*xs[i:i + n]))
            self._counts.append(len(r))
            outs += r
            i += n
        return outs

    def inputs_of(self, name: str) -> list[torch.Tensor]:
        """Case ``name``'s inputs."""
        i = next(j for j, c in enumerate(self.cases) if c.name == name)
        start = sum(self._arity[:i])
        return self.inputs[start:start + self._arity[i]]

    def split(self, outs: list[torch.Tensor]) -> dict[str, list[torch.Tensor]]:
        result: dict[str, list[torch.Tensor]] = {}
        k = 0
        for c, n in zip(self.cases, self._counts):
            result[c.name] = outs[k:k + n]
            k += n
        return result


def table_batch(dtype: torch.dtype, contiguous: bool, device: str = "cpu"
                ) -> tuple[Batch, dict[str, list[torch.Tensor]]]:
    """Every non-extern case of ``dtype`` whose inputs eager accepts, as one
    :class:`Batch` (inputs made on the CPU from one seeded generator, then moved to
    ``device``), and each case's eager results."""
    gen = torch.Generator().manual_seed(0)
    cases: list[OpCase] = []
    inputs: dict[str, list[torch.Tensor]] = {}
    expected: dict[str, list[torch.Tensor]] = {}
    for c in OP_TABLE:
        if dtype not in c.dtypes or c.extern:
            continue
        xs = [make_input(s, dtype, c.domain, contiguous, gen) for s in c.shapes]
        if c.extra is not None:
            torch.manual_seed(7)
            xs += list(c.extra())
        xs = [x.to(device) for x in xs]
        try:
            expected[c.name] = flatten(c.fn(*[x.clone() for x in xs]))
        except RuntimeError:
            continue
        cases.append(c)
        inputs[c.name] = xs
    return Batch(cases, inputs), expected


# -- edge shapes --------------------------------------------------------------------------
# Every case is also run with 0-d, empty and size-1 inputs, derived from its shapes (not
# written per op): a variant maps each input shape to a new one; where eager refuses the
# derived inputs (a fixed reshape, an index past the end), the op does not accept them
# and the variant is skipped.

def _substitute(size: int, new: int) -> Callable[[tuple[tuple[int, ...], ...]],
                                                  tuple[tuple[int, ...], ...]]:
    """Replace every dim equal to the one at ``size`` (``0``: the first dim of the first
    input, ``-1``: its last) by ``new``, in all inputs, so broadcasting and matmul
    operands stay consistent."""
    def derive(shapes: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
        first = next((s for s in shapes if s), None)
        if first is None:
            return shapes
        old = first[size]
        return tuple(tuple(new if d == old else d for d in s) for s in shapes)
    return derive


EDGE_VARIANTS: dict[str, Callable[[tuple[tuple[int, ...], ...]], tuple[tuple[int, ...], ...]]] = {
    "0d": lambda shapes: tuple(() for _ in shapes),           # every input 0-d
    "empty": _substitute(0, 0),                                # leading dim of size 0
    "empty_last": _substitute(-1, 0),                          # last dim of size 0
    "size1": _substitute(0, 1),                                # leading dim of size 1
    "ones": lambda shapes: tuple(tuple(1 for _ in s) for s in shapes),  # all dims 1
}


def edge_cases(case: OpCase) -> list[OpCase]:
    """``case`` with the inputs of each :data:`EDGE_VARIANTS` entry (named
    ``name@variant``); variants that do not change the shapes are left out."""
    out: list[OpCase] = []
    seen = {case.shapes}
    for variant, derive in EDGE_VARIANTS.items():
        shapes = derive(case.shapes)
        if shapes in seen:
            continue
        seen.add(shapes)
        out.append(replace(case, name=f"{case.name}@{variant}", shapes=shapes))
    return out


EDGE_TABLE: list[OpCase] = [e for c in OP_TABLE for e in edge_cases(c)]


def layout_problem(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> str | None:
    """None when every output has eager's sizes and, over its dims of more than one
    element, eager's strides (the strides of size-0/1 dims and of empty tensors do not
    matter); else the first difference."""
    for k, (a, e) in enumerate(zip(actual, expected)):
        if a.shape != e.shape or a.dtype != e.dtype:
            return f"output {k}: {a.dtype}{list(a.shape)}, eager {e.dtype}{list(e.shape)}"
        if e.numel() == 0:
            continue
        dims = [d for d in range(e.dim()) if e.shape[d] > 1]
        if [a.stride(d) for d in dims] != [e.stride(d) for d in dims]:
            return f"output {k}: strides {a.stride()}, eager {e.stride()}"
    return None


# Tolerances of the CPU and interpreter op tables, per result dtype (rtol, atol).
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-2, 1e-2),
       torch.bfloat16: (2e-2, 2e-2)}


def case_inputs(case: OpCase, dtype: torch.dtype, contiguous: bool) -> list[torch.Tensor]:
    """The inputs of ``case`` for ``dtype`` and layout, from a seed stable across
    processes (str hashes are not)."""
    gen = torch.Generator().manual_seed(zlib.crc32(f"{case.name}{dtype}{contiguous}".encode()))
    xs = [make_input(s, dtype, case.domain, contiguous, gen) for s in case.shapes]
    if case.extra is not None:
        torch.manual_seed(7)
        xs += list(case.extra())
    return xs


def compare(actual: list[torch.Tensor], expected: list[torch.Tensor],
            dtype: torch.dtype) -> str | None:
    """None when ``actual`` matches ``expected`` within :data:`TOL`, else the problem."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for a, e in zip(actual, expected):
        rtol, atol = TOL.get(e.dtype, TOL.get(dtype, (0.0, 0.0)))
        try:
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True,
                                       check_stride=False)
        except AssertionError as err:
            return " ".join(str(err).splitlines()[:4])
    return None
