"""Lowering rules for pointwise ops: arithmetic, math, comparisons, logical and bitwise
ops, ``where``, casts and constants. Type promotion follows torch: the result dtype is
the node's metadata dtype; operands are promoted with :func:`~.common.promote` and
float16/bfloat16 arithmetic runs in float32 (rounded to the result dtype per op, as
eager does; not after the ops whose result that dtype holds exactly, such as neg, abs
and max: ``builder.EXACT_IN_NARROW``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import sympy
import torch
from ember.inductor.codegen.registry import backend_for
from ember.inductor.loop_ir import IndexExpr
from ember.inductor.loop_ir.symbolic_index import from_ir
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.checks import RuntimeCheck, new_check, record_failure
from ember.inductor.lowering.common import (
    as_lazy,
    compute_dtype,
    element,
    out_meta,
    pointwise,
    promote,
    sizes_of,
)
from ember.inductor.lowering.registry import NotLowerable, existing_overloads, lowering
from ember.inductor.lowering.scalar_fit import as_converted, overflows
from ember.inductor.lowering.value_ranges import tensor_range
from ember.inductor.lowering.values import Lazy
from ember.inductor.lowering.written_args import src_is_written_input
from ember.runtime.ir import Node

# -- unary ops: ATen name -> loop-IR op ------------------------------------------------
_FLOAT_UNARY = {
    "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2",
    "log10": "log10", "log1p": "log1p", "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin",
    "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan",
    "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "asinh": "asinh", "acosh": "acosh",
    "atanh": "atanh", "erf": "erf", "erfc": "erfc", "sigmoid": "sigmoid",
    "reciprocal": "reciprocal",
    # special functions (family "special" of the loop-IR table): eager's edge values are
    # the ops' (NaN outside erfinv's [-1, 1], inf at lgamma's poles, NaN at digamma's)
    "erfinv": "erfinv", "lgamma": "lgamma", "digamma": "digamma",
}
_SAME_UNARY = {"neg": "neg", "abs": "abs", "sign": "sign", "sgn": "sign",
               "bitwise_not": "bitwise_not"}
_ROUNDING = {"floor": "floor", "ceil": "ceil", "round": "round", "trunc": "trunc"}


def _unary(op: str, float_only: bool) -> Any:
    def rule(ctx: Any, node: Node, x: Any) -> Lazy:
        out = out_meta(node).dtype
        dtype = compute_dtype(out if float_only else promote(x))
        if op == "bitwise_not" and dtype == torch.bool:
            return pointwise(node, [x], lambda b, v: b.compute("logical_not", v[0]),
                             compute=dtype)
        return pointwise(node, [x], lambda b, v: b.compute(op, v[0]), compute=dtype)

    return rule


for _name, _op in _FLOAT_UNARY.items():
    lowering(f"aten::{_name}.default")(_unary(_op, float_only=True))
for _name, _op in _SAME_UNARY.items():
    lowering(f"aten::{_name}.default")(_unary(_op, float_only=False))


def _rounding(op: str) -> Any:
    def rule(ctx: Any, node: Node, x: Any) -> Lazy:
        dtype = compute_dtype(promote(x))
        if not dtype.is_floating_point:
            return pointwise(node, [x], lambda b, v: v[0], compute=dtype)
        return pointwise(node, [x], lambda b, v: b.compute(op, v[0]), compute=dtype)

    return rule


for _name, _op in _ROUNDING.items():
    lowering(f"aten::{_name}.default")(_rounding(_op))


@lowering("aten::isnan.default", "aten::isinf.default")
def _isnan_isinf(ctx: Any, node: Node, x: Any) -> Lazy:
    op = node.target.split("::")[1].split(".")[0]
    dtype = compute_dtype(promote(x))
    if not dtype.is_floating_point:
        return pointwise(node, [x], lambda b, v: b.literal(False, torch.bool), compute=dtype)
    return pointwise(node, [x], lambda b, v: b.compute(op, v[0]), compute=dtype)


@lowering("aten::logical_not.default")
def _logical_not(ctx: Any, node: Node, x: Any) -> Lazy:
    return pointwise(node, [x], lambda b, v: b.compute("logical_not", v[0]),
                     compute=torch.bool)


# -- binary ops ------------------------------------------------------------------------
_BINARY = {
    "mul": "mul", "maximum": "maximum", "minimum": "minimum", "atan2": "atan2",
    "fmod": "fmod", "remainder": "remainder", "bitwise_and": "bitwise_and",
    "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
    "bitwise_left_shift": "lshift", "bitwise_right_shift": "rshift",
    "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
}
_BOOL_EQUIVALENT = {"mul": "logical_and", "bitwise_and": "logical_and",
                    "bitwise_or": "logical_or", "bitwise_xor": "logical_xor",
                    "maximum": "logical_or", "minimum": "logical_and"}


def _binary(op: str) -> Any:
    def rule(ctx: Any, node: Node, a: Any, b_: Any) -> Lazy:
        dtype = compute_dtype(promote(a, b_))
        if op == "atan2" and not dtype.is_floating_point:
            dtype = compute_dtype(out_meta(node).dtype)
        name = _BOOL_EQUIVALENT.get(op, op) if dtype == torch.bool else op
        if dtype == torch.bool and name in ("fmod", "remainder", "lshift", "rshift"):
            raise NotLowerable(f"{op} on bool")
        if name in ("fmod", "remainder"):
            return _integer_division(ctx, node, a, b_, name, dtype)
        return pointwise(node, [a, b_], lambda b, v: b.compute(name, v[0], v[1]),
                         compute=dtype)

    return rule


# Integer division by zero and MIN // -1, as eager does them on CPU (int8, int16, int32,
# int64, uint8; tests/test_int_safety.py checks every cell):
#   op                            x / 0                              MIN / -1
#   div(floor), floor_divide, //  RuntimeError("ZeroDivisionError")  MIN (wraps around)
#   div(trunc)                    RuntimeError("ZeroDivisionError")  MIN (eager int32/int64
#                                                                    die of SIGFPE)
#   remainder, %, fmod            RuntimeError("ZeroDivisionError")  0
# The kernels never trap (the prelude's ember_floordiv & co. guard / 0 and / -1); the
# division by zero is a run-time check (checks.py) unless the divisor is known nonzero
# at compile time (x // 2). CUDA eager does not raise (the GPU's division gives some
# value): Triton kernels emit no check either, and their values for / 0 are the GPU's
# (the backend says which: ``KernelBackend.checks_integer_division``).
def _division_check(ctx: Any, node: Node, divisor: Any, dtype: torch.dtype
                    ) -> RuntimeCheck | None:
    if dtype.is_floating_point or dtype == torch.bool:
        return None
    if not backend_for(ctx.device.type).checks_integer_division:
        return None
    known = tensor_range(ctx, divisor)
    if known is not None and (known[0] > 0 or known[1] < 0):
        return None
    return new_check(ctx, "RuntimeError",
                     f"ZeroDivisionError: integer division by zero in {node.target}")


def _integer_division(ctx: Any, node: Node, a: Any, b_: Any, op: str,
                      dtype: torch.dtype) -> Lazy:
    """``op(a, b_)`` (floordiv, truncdiv, remainder, fmod), checked as in the table."""
    check = _division_check(ctx, node, b_, dtype)

    def body(b: BodyBuilder, v: list[str]) -> str:
        if check is not None:
            record_failure(b, check, b.compute("eq", v[1], b.literal(0, dtype)), v[0])
        return b.compute(op, v[0], v[1])

    return pointwise(node, [a, b_], body, compute=dtype)


for _name, _op in _BINARY.items():
    lowering(*existing_overloads(_name, ("Tensor", "Scalar", "default")))(_binary(_op))


@lowering("aten::fmax.default", "aten::fmin.default")
def _fmax(ctx: Any, node: Node, a: Any, b_: Any) -> Lazy:
    """maximum/minimum that ignore NaN: the other operand wins."""
    op = "maximum" if "fmax" in node.target else "minimum"
    dtype = compute_dtype(promote(a, b_))
    if dtype == torch.bool:
        raise NotLowerable(f"{op} on bool")

    # NOTE: maximum/minimum give their second operand on ties; eager's fmax(0., -0.) is
    # 0. (the first) in float32/float16/float64 and -0. in bfloat16
    first_wins = out_meta(node).dtype != torch.bfloat16

    def body(b: BodyBuilder, v: list[str]) -> str:
        r = b.compute(op, v[1], v[0]) if first_wins else b.compute(op, v[0], v[1])
        if not dtype.is_floating_point:
            return r
        r = b.compute("where", b.compute("isnan", v[1]), v[0], r)
        return b.compute("where", b.compute("isnan", v[0]), v[1], r)

    return pointwise(node, [a, b_], body, compute=dtype)


def _add_sub(op: str) -> Any:
    def rule(ctx: Any, node: Node, a: Any, b_: Any, alpha: Any = 1) -> Lazy:
        dtype = compute_dtype(promote(a, b_))
        if dtype == torch.bool:
            if op == "sub":
                raise NotLowerable("sub on bool")
            return pointwise(node, [a, b_], lambda b, v: b.compute("logical_or", *v),
                             compute=dtype)

        def body(b: BodyBuilder, v: list[str]) -> str:
            rhs = v[1] if alpha == 1 else b.compute("mul", v[1], b.literal(alpha, dtype))
            return b.compute(op, v[0], rhs)

        return pointwise(node, [a, b_], body, compute=dtype)

    return rule


for _ovl in ("Tensor", "Scalar"):
    lowering(f"aten::add.{_ovl}")(_add_sub("add"))
    lowering(f"aten::sub.{_ovl}")(_add_sub("sub"))


@lowering("aten::rsub.Tensor", "aten::rsub.Scalar")
def _rsub(ctx: Any, node: Node, a: Any, b_: Any, alpha: Any = 1) -> Any:
    return _add_sub("sub")(ctx, node, b_, a, alpha)


@lowering("aten::div.Tensor", "aten::div.Scalar")
def _div(ctx: Any, node: Node, a: Any, b_: Any) -> Lazy:
    dtype = compute_dtype(out_meta(node).dtype)
    return pointwise(node, [a, b_], lambda b, v: b.compute("truediv", *v), compute=dtype)


@lowering("aten::div.Tensor_mode", "aten::div.Scalar_mode")
def _div_mode(ctx: Any, node: Node, a: Any, b_: Any, *, rounding_mode: Any = None) -> Any:
    dtype = compute_dtype(promote(a, b_))
    if rounding_mode is None:
        return _div(ctx, node, a, b_)
    if dtype == torch.bool:
        raise NotLowerable("integer division of bools")
    if dtype.is_floating_point:
        if rounding_mode == "trunc":
            out = out_meta(node).dtype

            def trunc_body(b: BodyBuilder, v: list[str]) -> str:
                # NOTE: eager rounds the quotient to the result dtype before truncating
                q = b.cast(b.cast(b.compute("truediv", *v), out), dtype)
                return b.compute("trunc", q)

            return pointwise(node, [a, b_], trunc_body, compute=dtype)
        return pointwise(node, [a, b_], lambda b, v: b.compute("floordiv", *v), compute=dtype)
    op = "truncdiv" if rounding_mode == "trunc" else "floordiv"
    return _integer_division(ctx, node, a, b_, op, dtype)


@lowering("aten::floor_divide.default", "aten::floor_divide.Scalar")
def _floor_divide(ctx: Any, node: Node, a: Any, b_: Any) -> Any:
    return _div_mode(ctx, node, a, b_, rounding_mode="floor")


@lowering("aten::pow.Tensor_Tensor", "aten::pow.Tensor_Scalar", "aten::pow.Scalar")
def _pow(ctx: Any, node: Node, a: Any, e: Any) -> Lazy:
    dtype = compute_dtype(out_meta(node).dtype)
    if dtype == torch.bool:
        raise NotLowerable("pow on bool")
    if isinstance(e, int) and not isinstance(e, bool) and e < 0 and not (
            dtype.is_floating_point or dtype.is_complex):
        raise NotLowerable("an integer to a negative power (eager's call raises)")
    if isinstance(e, (int, float)) and not isinstance(e, bool):
        body = _pow_by_constant(e, dtype.is_floating_point)
        if body is not None:
            return pointwise(node, [a], body, compute=dtype)
    return pointwise(node, [a, e], lambda b, v: b.compute("pow", *v), compute=dtype)


def _pow_by_constant(e: float, floating: bool) -> Any:
    """The body of ``x ** e`` without ``pow`` for the exponents eager ATen also
    special-cases (so results match it bit for bit): 1, 2, 3, 0.5, and for floats -0.5,
    -1, -2. None for any other exponent."""
    def one(b: BodyBuilder, x: str) -> str:
        return b.literal(1, b.dtype(x))

    rules: dict[float, Callable[[BodyBuilder, str], str]] = {
        1: lambda b, x: x,
        2: lambda b, x: b.compute("mul", x, x),
        3: lambda b, x: b.compute("mul", b.compute("mul", x, x), x),
    }
    if floating:
        rules.update({
            0.5: lambda b, x: b.compute("sqrt", x),
            -0.5: lambda b, x: b.compute("rsqrt", x),
            -1: lambda b, x: b.compute("truediv", one(b, x), x),
            -2: lambda b, x: b.compute("truediv", one(b, x), b.compute("mul", x, x)),
        })
    rule = rules.get(e)
    if rule is None:
        return None
    return lambda b, v: rule(b, v[0])


@lowering("aten::logical_and.default", "aten::logical_or.default",
          "aten::logical_xor.default")
def _logical(ctx: Any, node: Node, a: Any, b_: Any) -> Lazy:
    op = node.target.split("::")[1].split(".")[0]

    def body(b: BodyBuilder, v: list[str]) -> str:
        return b.compute(op, *(_truth(b, x) for x in v))

    return pointwise(node, [a, b_], body, compute=compute_dtype(promote(a, b_)))


def _truth(b: BodyBuilder, v: str) -> str:
    if b.dtype(v) == torch.bool:
        return v
    v = b.cast(v, compute_dtype(b.dtype(v)))
    return b.compute("ne", v, b.literal(0, b.dtype(v)))


@lowering("aten::where.self")
def _where(ctx: Any, node: Node, cond: Any, a: Any, b_: Any) -> Lazy:
    dtype = compute_dtype(out_meta(node).dtype)
    meta = out_meta(node)
    sizes = tuple(from_ir(s) for s in meta.sizes)

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        c = _truth(b, element(b, cond, index, cond.dtype))
        x = element(b, a, index, dtype)
        y = element(b, b_, index, dtype)
        return b.op_result(b.compute("where", c, x, y), meta.dtype)

    return Lazy(fn, meta.dtype, sizes)


@lowering("aten::clamp.default", "aten::clamp.Tensor", "aten::clamp_min.default",
          "aten::clamp_max.default", "aten::clamp_min.Tensor", "aten::clamp_max.Tensor",
          "aten::hardtanh.default")
def _clamp(ctx: Any, node: Node, x: Any, lo: Any = None, hi: Any = None) -> Lazy:
    name = node.target.split("::")[1].split(".")[0]
    if name == "clamp_max":
        lo, hi = None, lo
    if name == "hardtanh":
        lo = -1.0 if lo is None else lo
        hi = 1.0 if hi is None else hi
    dtype = compute_dtype(promote(x, *(v for v in (lo, hi) if v is not None)))
    if dtype == torch.bool:
        raise NotLowerable("clamp on bool")
    out_dtype = out_meta(node).dtype
    for bound in (lo, hi):
        _check_fits(bound, out_dtype)
    lo, hi = (as_converted(v, out_dtype) for v in (lo, hi))
    args = [x] + [v for v in (lo, hi) if v is not None]

    def body(b: BodyBuilder, v: list[str]) -> str:
        # NOTE: the bound first: maximum/minimum give their second operand on ties, and
        # eager keeps x there (clamp_min(-0., 0.) is -0.); a NaN bound still wins
        r = v[0]
        i = 1
        if lo is not None:
            r = b.compute("maximum", v[i], r)
            i += 1
        if hi is not None:
            r = b.compute("minimum", v[i], r)
        return r

    return pointwise(node, args, body, compute=dtype)


def _check_fits(value: Any, dtype: torch.dtype) -> None:
    """Raises NotLowerable where eager raises converting ``value`` (scalar_fit.py)."""
    if overflows(value, dtype):
        raise NotLowerable(f"the value {value!r} overflows {dtype} (eager raises)")


@lowering("aten::relu.default")
def _relu(ctx: Any, node: Node, x: Any) -> Lazy:
    dtype = compute_dtype(promote(x))
    if dtype == torch.bool:
        raise NotLowerable("relu on bool")
    # NOTE: relu(-0.) is -0. in eager (x kept on ties, see _clamp)
    return pointwise(node, [x], lambda b, v: b.compute(
        "maximum", b.literal(0, dtype), v[0]), compute=dtype)


@lowering("aten::leaky_relu.default")
def _leaky_relu(ctx: Any, node: Node, x: Any, slope: Any = 0.01) -> Lazy:
    dtype = compute_dtype(out_meta(node).dtype)

    def body(b: BodyBuilder, v: list[str]) -> str:
        pos = b.compute("gt", v[0], b.literal(0, dtype))
        return b.compute("where", pos, v[0], b.compute("mul", v[0], b.literal(slope, dtype)))

    return pointwise(node, [x], body, compute=dtype)


@lowering("aten::elu.default")
def _elu(ctx: Any, node: Node, x: Any, alpha: Any = 1, scale: Any = 1,
         input_scale: Any = 1) -> Lazy:
    """``x * scale`` where ``x > 0``, else ``expm1(x * input_scale) * alpha * scale``."""
    dtype = compute_dtype(out_meta(node).dtype)
    if not dtype.is_floating_point:
        raise NotLowerable("elu of integers")

    def body(b: BodyBuilder, v: list[str]) -> str:
        def lit(c: Any) -> str:
            return b.literal(c, dtype)

        neg = b.compute("expm1", b.compute("mul", v[0], lit(input_scale)))
        neg = b.compute("mul", neg, lit(alpha * scale))
        pos = b.compute("gt", v[0], lit(0))
        return b.compute("where", pos, b.compute("mul", v[0], lit(scale)), neg)

    return pointwise(node, [x], body, compute=dtype)


@lowering("aten::gelu.default")
def _gelu(ctx: Any, node: Node, x: Any, *, approximate: str = "none") -> Lazy:
    dtype = compute_dtype(out_meta(node).dtype)

    def body(b: BodyBuilder, v: list[str]) -> str:
        def lit(c: float) -> str:
            return b.literal(c, dtype)

        half_x = b.compute("mul", v[0], lit(0.5))
        if approximate == "tanh":
            cube = b.compute("mul", b.compute("mul", v[0], v[0]), v[0])
            inner = b.compute("mul", lit(math.sqrt(2 / math.pi)), b.compute(
                "add", v[0], b.compute("mul", cube, lit(0.044715))))
            return b.compute("mul", half_x, b.compute("add", lit(1.0), b.compute("tanh", inner)))
        e = b.compute("erf", b.compute("mul", v[0], lit(1 / math.sqrt(2))))
        return b.compute("mul", half_x, b.compute("add", lit(1.0), e))

    return pointwise(node, [x], body, compute=dtype)


@lowering("aten::silu.default")
def _silu(ctx: Any, node: Node, x: Any) -> Lazy:
    dtype = compute_dtype(out_meta(node).dtype)
    return pointwise(node, [x], lambda b, v: b.compute("mul", v[0], b.compute(
        "sigmoid", v[0])), compute=dtype)


# -- casts, copies, constants ----------------------------------------------------------
@lowering("aten::_to_copy.default", "aten::clone.default", "aten::alias.default",
          "aten::detach.default", "aten::lift_fresh_copy.default",
          "aten::_assert_tensor_metadata.default")
def _to_copy(ctx: Any, node: Node, x: Any, *args: Any, **kwargs: Any) -> Any:
    if node.target == "aten::_assert_tensor_metadata.default":
        return None
    meta = out_meta(node)
    if meta.device.type != ctx.device.type:
        raise NotLowerable("device transfer")
    lazy = as_lazy(x)
    if lazy.dtype == meta.dtype:
        return x if node.target != "aten::_to_copy.default" else lazy
    return Lazy(lambda b, i: b.cast(lazy.element(b, i), meta.dtype), meta.dtype, lazy.sizes)


@lowering("aten::copy.default")
def _copy(ctx: Any, node: Node, dst: Any, src: Any, non_blocking: bool = False) -> Any:
    meta = out_meta(node)
    if src_is_written_input(ctx, node, src):
        return src  # an input a user kernel wrote in place: its new value (written_args)
    return Lazy(lambda b, i: element(b, src, i, meta.dtype), meta.dtype, sizes_of(node))


def _constant(node: Node, value: Any) -> Lazy:
    meta = out_meta(node)
    if not isinstance(value, (bool, int, float, sympy.Basic)):  # sympy: a symbolic int
        raise NotLowerable("non-scalar fill value")
    _check_fits(value, meta.dtype)
    value = as_converted(value, meta.dtype)
    return Lazy(lambda b, i: b.literal(value, meta.dtype), meta.dtype, sizes_of(node))


@lowering("aten::full.default")
def _full(ctx: Any, node: Node, size: Any, value: Any, **kwargs: Any) -> Lazy:
    return _constant(node, value)


@lowering("aten::full_like.default", "aten::fill.Scalar")
def _full_like(ctx: Any, node: Node, x: Any, value: Any, **kwargs: Any) -> Lazy:
    return _constant(node, value)


@lowering("aten::zeros_like.default", "aten::empty_like.default",
          "aten::empty.memory_format", "aten::zeros.default", "aten::new_zeros.default",
          "aten::empty_strided.default", "aten::new_empty.default",
          "aten::new_empty_strided.default")
def _zeros(ctx: Any, node: Node, *args: Any, **kwargs: Any) -> Lazy:
    return _constant(node, 0)


@lowering("aten::ones_like.default", "aten::ones.default", "aten::new_ones.default")
def _ones(ctx: Any, node: Node, *args: Any, **kwargs: Any) -> Lazy:
    return _constant(node, 1)


@lowering("aten::scalar_tensor.default")
def _scalar_tensor(ctx: Any, node: Node, value: Any, **kwargs: Any) -> Lazy:
    return _constant(node, value)


@lowering("aten::fill.Tensor")
def _fill_tensor(ctx: Any, node: Node, x: Any, value: Any) -> Lazy:
    meta = out_meta(node)
    return Lazy(lambda b, i: element(b, value, (), meta.dtype), meta.dtype, sizes_of(node))


@lowering("aten::arange.start_step", "aten::arange.default", "aten::arange.start")
def _arange(ctx: Any, node: Node, *args: Any, **kwargs: Any) -> Lazy:
    """``start + i * step``, each read by its position in the overload's schema: a
    symbolic ``start`` or ``step`` (a sympy expression over the sizes) is read at run
    time (they were taken for absent: ``arange(0, s0 * s1, s1)`` counted by 1)."""
    start: Any = 0
    step: Any = kwargs.get("step", 1)
    if node.target != "aten::arange.default":
        start = args[0]
    if node.target == "aten::arange.start_step" and len(args) > 2:
        step = args[2]
    if any(isinstance(v, bool) or not isinstance(v, (int, float, sympy.Basic))
           for v in (start, step)):
        raise NotLowerable(f"arange with start {start!r}, step {step!r}")
    meta = out_meta(node)
    dtype = compute_dtype(meta.dtype)
    acc = torch.float64 if dtype.is_floating_point else torch.int64

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        i = b.cast(b.index_value(index[0]), acc)
        v = b.compute("add", b.literal(start, acc), b.compute("mul", i, b.literal(step, acc)))
        return b.cast(v, meta.dtype)

    return Lazy(fn, meta.dtype, sizes_of(node))
