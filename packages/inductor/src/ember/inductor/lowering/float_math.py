"""Lowering rules for floating-point math of two operands and for ``polygamma``:
``copysign``, ``hypot``, ``nextafter`` (one loop-IR op each), ``logaddexp`` and
``logaddexp2`` (composed of loop-IR ops), ``polygamma`` of order 0 and 1.

The results are floats: integer and bool operands are read as the result dtype (torch
promotes ``copysign``'s to the default float; eager refuses them for the others), and
float16/bfloat16 compute in float32 (``common.compute_dtype``). The one-argument special
functions (``erfinv``, ``lgamma``, ``digamma``) are rows of ``pointwise._FLOAT_UNARY``.
What stays a fallback, and why: ``nextafter`` on float16/bfloat16 (it steps in the
storage dtype, which float32 arithmetic cannot do), ``polygamma`` of order 2 and more (a
Hurwitz zeta function; not lowered).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.common import compute_dtype, out_meta, pointwise
from ember.inductor.lowering.registry import NotLowerable, lowering
from ember.inductor.lowering.values import Lazy
from ember.runtime.ir import Node

# -- binary float ops: ATen overload -> loop-IR op --------------------------------------
_FLOAT_BINARY = {
    "aten::copysign.Tensor": "copysign", "aten::copysign.Scalar": "copysign",
    "aten::hypot.default": "hypot", "aten::nextafter.default": "nextafter",
}
# ops whose result is a step in the storage dtype: not computed in float32 for 16-bit floats
_STORAGE_DTYPE_ONLY = {"nextafter"}


def _float_dtype(node: Node) -> torch.dtype:
    dtype = compute_dtype(out_meta(node).dtype)
    if not dtype.is_floating_point:
        raise NotLowerable(f"{node.target} with a {dtype} result")
    return dtype


def _float_binary(op: str) -> Any:
    def rule(ctx: Any, node: Node, a: Any, b_: Any) -> Lazy:
        if op in _STORAGE_DTYPE_ONLY and out_meta(node).dtype != _float_dtype(node):
            raise NotLowerable(f"{op} on {out_meta(node).dtype} (steps in that dtype)")
        return pointwise(node, [a, b_], lambda b, v: b.compute(op, v[0], v[1]),
                         compute=_float_dtype(node))

    return rule


for _target, _op in _FLOAT_BINARY.items():
    lowering(_target)(_float_binary(_op))


# -- log(exp(a) + exp(b)) in base e and base 2 ------------------------------------------
# base -> (the exponential, the factor turning log1p's natural log into that base)
_LOGADDEXP = {"aten::logaddexp.default": ("exp", 1.0),
              "aten::logaddexp2.default": ("exp2", 1 / math.log(2))}


@lowering(*_LOGADDEXP)
def _logaddexp(ctx: Any, node: Node, a: Any, b_: Any) -> Lazy:
    """``max(a, b) + log1p(exp(-|a - b|))`` (log1p scaled by ``1 / ln 2`` in base 2), and
    ``a`` where ``a`` and ``b`` are the same infinity (``inf - inf`` is NaN): the
    identities eager computes, so NaN, -inf and +inf come out as there."""
    exp, scale = _LOGADDEXP[node.target]
    dtype = _float_dtype(node)

    def body(b: BodyBuilder, v: list[str]) -> str:
        x, y = v
        larger = b.compute("maximum", x, y)  # NaN-propagating
        gap = b.compute("neg", b.compute("abs", b.compute("sub", x, y)))
        tail = b.compute("log1p", b.compute(exp, gap))
        if scale != 1.0:
            tail = b.compute("mul", tail, b.literal(scale, dtype))
        same_inf = b.compute("logical_and", b.compute("isinf", x), b.compute("eq", x, y))
        return b.compute("where", same_inf, x, b.compute("add", larger, tail))

    return pointwise(node, [a, b_], body, compute=dtype)


# -- polygamma(n, x): the n-th derivative of digamma -----------------------------------
_POLYGAMMA = {0: "digamma", 1: "trigamma"}


@lowering("aten::polygamma.default")
def _polygamma(ctx: Any, node: Node, n: Any, x: Any) -> Lazy:
    op = _POLYGAMMA.get(n) if isinstance(n, int) and not isinstance(n, bool) else None
    if op is None:
        raise NotLowerable(f"polygamma of order {n!r} (only 0 and 1 are lowered)")
    return pointwise(node, [x], lambda b, v: b.compute(op, v[0]),
                     compute=_float_dtype(node))
