"""Lowering rules for the backward ops Core ATen keeps (what autograd graphs contain)."""

from __future__ import annotations

from typing import Any

import torch
from ember.inductor.loop_ir import IndexExpr
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.common import compute_dtype, element, out_meta, pointwise
from ember.inductor.lowering.reductions import _zero, keepdim_value, reduce, reduced_dims
from ember.inductor.lowering.registry import lowering
from ember.inductor.lowering.values import Lazy, TensorValue
from ember.runtime.ir import Node


@lowering("aten::threshold_backward.default")
def _threshold_backward(ctx: Any, node: Node, grad: Any, x: Any, threshold: Any) -> Lazy:
    dtype = compute_dtype(out_meta(node).dtype)

    def body(b: BodyBuilder, v: list[str]) -> str:
        dead = b.compute("le", v[1], b.literal(threshold, dtype))
        return b.compute("where", dead, b.literal(0, dtype), v[0])

    return pointwise(node, [grad, x], body, compute=dtype)


@lowering("aten::sigmoid_backward.default")
def _sigmoid_backward(ctx: Any, node: Node, grad: Any, out: Any) -> Lazy:
    dtype = compute_dtype(out_meta(node).dtype)

    def body(b: BodyBuilder, v: list[str]) -> str:
        # NOTE: eager's order, (grad * (1 - y)) * y: a zero gradient stays a (signed)
        # zero where y * (1 - y) would overflow to inf (special_values tests)
        one_minus = b.compute("sub", b.literal(1, dtype), v[1])
        return b.compute("mul", b.compute("mul", v[0], one_minus), v[1])

    return pointwise(node, [grad, out], body, compute=dtype)


@lowering("aten::tanh_backward.default")
def _tanh_backward(ctx: Any, node: Node, grad: Any, out: Any) -> Lazy:
    dtype = compute_dtype(out_meta(node).dtype)

    def body(b: BodyBuilder, v: list[str]) -> str:
        sq = b.compute("mul", v[1], v[1])
        return b.compute("mul", v[0], b.compute("sub", b.literal(1, dtype), sq))

    return pointwise(node, [grad, out], body, compute=dtype)


@lowering("aten::_softmax_backward_data.default")
def _softmax_backward(ctx: Any, node: Node, grad: TensorValue, out: TensorValue, dim: int,
                      input_dtype: Any) -> Lazy:
    meta = out_meta(node)
    acc = compute_dtype(meta.dtype)
    d = reduced_dims(grad, dim)

    def prod(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        return b.compute("mul", element(b, grad, i, acc), element(b, out, i, acc))

    s = keepdim_value(ctx, reduce(ctx, node, "sum", prod, grad.sizes, d, True, acc),
                      grad.sizes, d, True)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        diff = b.compute("sub", element(b, grad, i, acc), s.element(b, _zero(i, d)))
        return b.op_result(b.compute("mul", element(b, out, i, acc), diff), meta.dtype)

    return Lazy(fn, meta.dtype, grad.sizes)


@lowering("aten::_log_softmax_backward_data.default")
def _log_softmax_backward(ctx: Any, node: Node, grad: TensorValue, out: TensorValue,
                          dim: int, input_dtype: Any) -> Lazy:
    meta = out_meta(node)
    acc = compute_dtype(meta.dtype)
    d = reduced_dims(grad, dim)

    def g(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        return element(b, grad, i, acc)

    s = keepdim_value(ctx, reduce(ctx, node, "sum", g, grad.sizes, d, True, acc),
                      grad.sizes, d, True)

    def fn(b: BodyBuilder, i: tuple[IndexExpr, ...]) -> str:
        e = b.compute("exp", element(b, out, i, acc))
        r = b.compute("sub", g(b, i), b.compute("mul", e, s.element(b, _zero(i, d))))
        return b.op_result(r, meta.dtype)

    return Lazy(fn, meta.dtype, grad.sizes)


_ = torch
