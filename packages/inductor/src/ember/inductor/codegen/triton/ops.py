"""Pointwise loop-IR ops as Triton expressions: one rule per op, in one table.

Each rule takes the argument expressions (value names), the dtype of the (first value)
argument and the result dtype, and returns a Triton expression. ``libdevice`` is the
module-level name every kernel binds (see ``ember.runtime.compiled.triton_math``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from ember.inductor.codegen.triton import special_math
from ember.inductor.codegen.triton.dtypes import is_float, tl_type

Rule = Callable[[list[str], torch.dtype, torch.dtype], str]
RULES: dict[str, Rule] = {}


def rule(*names: str) -> Callable[[Rule], Rule]:
    """Register the decorated function as the Triton rule of the ops ``names``."""

    def register(fn: Rule) -> Rule:
        for n in names:
            RULES[n] = fn
        return fn

    return register


def infix(symbol: str) -> Rule:
    return lambda a, _t, _r: f"({a[0]} {symbol} {a[1]})"


def call(fn: str) -> Rule:
    return lambda a, _t, _r: f"{fn}({', '.join(a)})"


for _op, _sym in (("add", "+"), ("sub", "-"), ("mul", "*"), ("eq", "=="), ("ne", "!="),
                  ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="),
                  ("logical_and", "&"), ("logical_or", "|"), ("logical_xor", "^"),
                  ("bitwise_and", "&"), ("bitwise_or", "|"), ("bitwise_xor", "^")):
    RULES[_op] = infix(_sym)

for _op, _fn in (("exp", "tl.exp"), ("exp2", "tl.exp2"), ("log", "tl.log"),
                 ("log2", "tl.log2"), ("rsqrt", "tl.rsqrt"),
                 ("sin", "tl.sin"), ("cos", "tl.cos"), ("erf", "tl.erf"),
                 ("floor", "tl.floor"), ("ceil", "tl.ceil"),
                 ("expm1", "libdevice.expm1"), ("log10", "libdevice.log10"),
                 ("log1p", "libdevice.log1p"), ("tan", "libdevice.tan"),
                 ("asin", "libdevice.asin"), ("acos", "libdevice.acos"),
                 ("atan", "libdevice.atan"), ("sinh", "libdevice.sinh"),
                 ("cosh", "libdevice.cosh"), ("tanh", "libdevice.tanh"),
                 ("asinh", "libdevice.asinh"), ("acosh", "libdevice.acosh"),
                 ("atanh", "libdevice.atanh"), ("erfc", "libdevice.erfc"),
                 ("round", "libdevice.nearbyint"), ("trunc", "libdevice.trunc"),
                 ("atan2", "libdevice.atan2")):
    RULES[_op] = call(_fn)


@rule("sqrt")
def _sqrt(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    return f"tl.sqrt_rn({a[0]})" if t == torch.float32 else f"tl.sqrt({a[0]})"


@rule("sigmoid")
def _sigmoid(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    # NOTE: not tl.sigmoid, a @triton.jit library function (see reductions.py's note).
    return f"(1.0 / (1.0 + tl.exp(-{a[0]})))"


@rule("truediv")
def _truediv(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    if is_float(t):
        return f"({a[0]} / {a[1]})"
    return f"({a[0]}.to({tl_type(r)}) / {a[1]}.to({tl_type(r)}))"


@rule("floordiv")
def _floordiv(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    x, y = a
    if is_float(t):
        return f"_ember_ffloordiv({x}, {y})"
    if t == torch.bool:
        return x
    # Triton's integer // truncates; step down when the signs differ and it was inexact.
    return (f"(({x} // {y}) - ((({x} % {y}) != 0) & (({x} < 0) != ({y} < 0)))"
            f".to({tl_type(t)}))")


@rule("truncdiv")
def _truncdiv(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    if is_float(t):
        return f"libdevice.trunc({a[0]} / {a[1]})"
    return f"({a[0]} // {a[1]})"


def _c_remainder(x: str, y: str, t: torch.dtype) -> str:
    """C's fmod / srem (the result takes the dividend's sign). NOTE: floats through
    libdevice: Triton compiles a float % to a - trunc(a / b) * b on the GPU, which loses
    the sign of a zero result and is inexact for large quotients."""
    return f"libdevice.fmod({x}, {y})" if is_float(t) else f"({x} % {y})"


@rule("fmod")
def _fmod(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    return _c_remainder(a[0], a[1], t)


@rule("remainder")
def _remainder(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    x, y = a
    rem = _c_remainder(x, y, t)
    fix = f"(({rem} != 0) & (({rem} < 0) != ({y} < 0)))"
    return f"tl.where({fix}, {rem} + {y}, {rem})"


def _shift_amount_ok(y: str, t: torch.dtype) -> str:
    bits = torch.iinfo(t).bits
    return f"(({y} >= 0) & ({y} < {bits}))"


# A shift by a negative amount or by the bit width or more gives 0 (left) or the sign
# fill (right), as in eager; the shift itself then uses an in-range amount.
@rule("lshift")
def _lshift(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    x, y = a
    ok = _shift_amount_ok(y, t)
    return f"tl.where({ok}, {x} << tl.where({ok}, {y}, 0), 0)"


@rule("rshift")
def _rshift(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    x, y = a
    ok = _shift_amount_ok(y, t)
    fill = f"tl.where({x} < 0, -1, 0)" if t.is_signed else "0"
    return f"tl.where({ok}, {x} >> tl.where({ok}, {y}, 0), {fill})"


@rule("pow")
def _pow(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    if not is_float(t):
        return f"_ember_ipow({a[0]}, {a[1]})"
    return f"libdevice.pow({a[0]}, {a[1]})"


# NOTE: not tl.rand / tl.randn, @triton.jit library functions (see reductions.py's
# note): _ember_random computes the same values from builtins only.
RULES["rand"] = lambda a, _t, _r: f"_ember_random({a[0]}, {a[1]}, False)"
RULES["randn"] = lambda a, _t, _r: f"_ember_random({a[0]}, {a[1]}, True)"


# Helper functions some rules call; a kernel module defines the ones its code names.
HELPERS: dict[str, str] = {
    "_ember_ipow": '''
@triton.jit
def _ember_ipow(a, b):
    # Integer power by squaring over the exponent's bits; a negative exponent gives
    # 1 / a**-b truncated (nonzero only for a = 1 and a = -1), as in eager.
    zero = a * 0 + b * 0
    result = zero + 1
    base = zero + a
    e = zero + b
    for _ in range(63):
        result = tl.where((e & 1) != 0, result * base, result)
        base = base * base
        e = e >> 1
    negative = tl.where(a == 1, 1, tl.where(a == -1, 1 - 2 * (b & 1), 0))
    return tl.where(b < 0, zero + negative, result)
''',
    "_ember_random": '''
@triton.jit
def _ember_random(key, offset, NORMAL: tl.constexpr):
    # Philox 4x32-10 as tl.rand / tl.randn compute it (and the C++ prelude's ember_rand):
    # key words (lo32(key), hi32(key)), counter (lo32(offset), hi32(offset), 0, 0); the
    # first word as a uniform float in [0, 1), or Box-Muller on the first two words.
    seed = key.to(tl.uint64)
    k0 = (seed & 0xFFFFFFFF).to(tl.uint32)
    k1 = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
    c0 = offset.to(tl.uint32)
    c1 = (offset >> 32).to(tl.uint32)
    c2 = c0 * 0
    c3 = c2
    for _ in tl.static_range(10):
        a0 = c0
        a2 = c2
        c0 = tl.umulhi(a2, 0xCD9E8D57) ^ c1 ^ k0
        c2 = tl.umulhi(a0, 0xD2511F53) ^ c3 ^ k1
        c1 = tl.mul(a2, 0xCD9E8D57, sanitize_overflow=False)
        c3 = tl.mul(a0, 0xD2511F53, sanitize_overflow=False)
        k0 = tl.add(k0, 0x9E3779B9, sanitize_overflow=False)
        k1 = tl.add(k1, 0xBB67AE85, sanitize_overflow=False)
    x0 = c0.to(tl.int32, bitcast=True)
    u0 = tl.where(x0 < 0, ~x0, x0).to(tl.float32) * 4.6566127342e-10
    if NORMAL:
        x1 = c1.to(tl.int32, bitcast=True)
        u1 = tl.where(x1 < 0, ~x1, x1).to(tl.float32) * 4.6566127342e-10
        u0 = tl.maximum(u0, 1.0e-7)
        return tl.sqrt(-2.0 * tl.log(u0)) * tl.cos(6.283185307179586 * u1)
    return u0
''',
    "_ember_ffloordiv": '''
@triton.jit
def _ember_ffloordiv(a, b):
    # Eager's float floor division: from fmod, so that a quotient that a / b rounds up
    # to an integer is not floored one too high.
    m = libdevice.fmod(a, b)
    # NOTE: div_rn, IEEE division: Triton's / (div.full) flushes denormal operands
    d = tl.div_rn(a - m, b)
    d = tl.where((m != 0) & ((b < 0) != (m < 0)), d - 1.0, d)
    f = tl.floor(d)
    f = tl.where(d - f > 0.5, f + 1.0, f)
    # a zero quotient keeps the sign of a / b (0 * (a / b) is that zero, or NaN)
    f = tl.where(d == 0, 0.0 * (a / b), f)
    return tl.where(b == 0, a / b, f)
''',
}


def _minmax(fn: str) -> Rule:
    def emit(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
        if is_float(t):
            return f"{fn}({a[0]}, {a[1]}, propagate_nan=tl.PropagateNan.ALL)"
        if t == torch.bool:
            return f"({a[0]} | {a[1]})" if fn == "tl.maximum" else f"({a[0]} & {a[1]})"
        return f"{fn}({a[0]}, {a[1]})"

    return emit


RULES["maximum"] = _minmax("tl.maximum")
RULES["minimum"] = _minmax("tl.minimum")

# copysign, nextafter, hypot and the special functions (erfinv, lgamma, digamma, trigamma)
RULES.update(special_math.RULES)
HELPERS.update(special_math.HELPERS)


@rule("neg")
def _neg(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    # NOTE: Triton compiles -x to 0 - x, which is +0. for x = 0.; eager gives -0.
    return f"({a[0]} * -1.0)" if is_float(t) else f"(-{a[0]})"


@rule("abs")
def _abs(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    return a[0] if t == torch.bool else f"tl.abs({a[0]})"


@rule("reciprocal")
def _reciprocal(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    return f"(1.0 / {a[0]})" if is_float(t) else f"(1 // {a[0]})"


@rule("sign")
def _sign(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    x = a[0]
    if t == torch.bool:
        return x
    ty = tl_type(t)
    # NOTE: sign(NaN) is 0, as in eager
    return f"(({x} > 0).to({ty}) - ({x} < 0).to({ty}))"


@rule("isnan")
def _isnan(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    return f"({a[0]} != {a[0]})"  # false for integers, with the right shape


@rule("isinf")
def _isinf(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    if not is_float(t):
        return f"({a[0]} != {a[0]})"  # always false, with the right shape
    return f"(tl.abs({a[0]}) == float('inf'))"


@rule("logical_not")
def _logical_not(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    return f"({a[0]} == 0)"


@rule("bitwise_not")
def _bitwise_not(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    return f"({a[0]} == 0)" if t == torch.bool else f"(~{a[0]})"


@rule("where")
def _where(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    return f"tl.where({a[0]}, {a[1]}, {a[2]})"


@rule("cast")
def _cast(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    if r == t:
        return a[0]
    if r == torch.bool and t in (torch.float16, torch.bfloat16):
        # NOTE: compared in float32: Triton's interpreter compares 16-bit floats by their
        # bits (-0. != 0. there)
        return f"({a[0]}.to(tl.float32) != 0)"
    if r == torch.bool:
        return f"({a[0]} != 0)"
    if r in (torch.float16, torch.bfloat16) and not is_float(t):
        # Through float32, as torch's own conversion does (and Triton's interpreter
        # gets int -> bfloat16 wrong).
        return to_half(f"{a[0]}.to(tl.float32)", r)
    if r in (torch.float16, torch.bfloat16) and t in (torch.float32, torch.float64):
        return to_half(a[0], r)
    return f"{a[0]}.to({tl_type(r)})"


def to_half(x: str, r: torch.dtype) -> str:
    """``x`` (float32) converted to float16/bfloat16.

    NOTE: on a GPU this rounds to nearest even, like torch; Triton's interpreter
    truncates float32 -> bfloat16 (one ulp low at most), which the interpreter tests
    tolerate except where an op magnifies it (test_triton_ops.INTERPRETER_GAPS)."""
    return f"{x}.to({tl_type(r)})"


def format_compute(op: str, args: list[str], arg_dtype: torch.dtype, dtype: torch.dtype) -> str:
    """The Triton expression of ``op(*args)``.

    Args:
        op: a loop-IR pointwise op.
        args: argument expressions.
        arg_dtype: dtype of the value arguments (``args[1]`` for ``where``).
        dtype: the result dtype.

    Raises:
        NotImplementedError: naming an op without a Triton rule.
    """
    fn = RULES.get(op)
    if fn is None:
        raise NotImplementedError(f"Triton codegen has no rule for the op {op!r}")
    return fn(args, arg_dtype, dtype)
