"""C++ expressions for loop-IR ops (one rule per op, in tables) and literals."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

CTYPES: dict[torch.dtype, str] = {
    torch.float32: "float", torch.float64: "double", torch.float16: "uint16_t",
    torch.bfloat16: "uint16_t", torch.int64: "int64_t", torch.int32: "int32_t",
    torch.int16: "int16_t", torch.int8: "int8_t", torch.uint8: "uint8_t", torch.bool: "bool",
}
LOWP = (torch.float16, torch.bfloat16)


def ctype(dtype: torch.dtype) -> str:
    """The C++ type holding a value of ``dtype``.

    Raises:
        NotImplementedError: for dtypes the C++ backend does not support.
    """
    if dtype not in CTYPES:
        raise NotImplementedError(f"the C++ backend does not support {dtype}")
    return CTYPES[dtype]


def literal(value: bool | float, dtype: torch.dtype) -> str:
    """A C++ literal of ``value`` as ``dtype`` (float16/bfloat16 as bit patterns)."""
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype in LOWP:
        bits = int(torch.tensor(float(value), dtype=dtype).view(torch.int16).item()) & 0xFFFF
        return f"static_cast<uint16_t>({bits})"
    t = ctype(dtype)
    if dtype.is_floating_point:
        v = float(value)
        if math.isnan(v):
            return f"std::numeric_limits<{t}>::quiet_NaN()"
        if math.isinf(v):
            sign = "-" if v < 0 else ""
            return f"{sign}std::numeric_limits<{t}>::infinity()"
        return f"static_cast<{t}>({v.hex()})"
    iv = int(value)
    if iv == -(2**63):
        return "std::numeric_limits<int64_t>::lowest()"
    return f"static_cast<{t}>({iv}LL)"


_INFIX = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "eq": "==", "ne": "!=",
          "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "logical_and": "&&",
          "logical_or": "||", "logical_xor": "!=", "bitwise_and": "&", "bitwise_or": "|",
          "bitwise_xor": "^"}
_FLOAT_FUNCS = {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin",
                "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh",
                "acosh", "atanh", "erf", "erfc", "floor", "ceil", "trunc", "atan2",
                "copysign", "nextafter", "hypot", "lgamma"}


CppRule = Callable[[list[str], torch.dtype, torch.dtype], str]
#: loop-IR pointwise op -> its C++ expression from (args, the operands' dtype, the result
#: dtype); one entry per op of ``loop_ir.POINTWISE_OPS`` (tests/test_loop_ir_ops.py)
RULES: dict[str, CppRule] = {}


def _infix(symbol: str) -> CppRule:
    def emit(a: list[str], arg_dtype: torch.dtype, out: torch.dtype) -> str:
        expr = f"({a[0]} {symbol} {a[1]})"
        return expr if out == torch.bool else f"static_cast<{ctype(out)}>{expr}"
    return emit


def _std(name: str) -> CppRule:
    return lambda a, _t, _out: f"std::{name}({', '.join(a)})"


def _float_or_int(float_fn: str, int_fn: str) -> CppRule:
    """``float_fn`` (a C++ function) on floats, the prelude's template ``int_fn`` else."""
    def emit(a: list[str], arg_dtype: torch.dtype, out: torch.dtype) -> str:
        if arg_dtype.is_floating_point:
            return f"{float_fn}({a[0]}, {a[1]})"
        return f"{int_fn}<{ctype(out)}>({a[0]}, {a[1]})"
    return emit


def _template(name: str) -> CppRule:
    """The prelude's template ``name<result type>(args)``."""
    return lambda a, _t, out: f"{name}<{ctype(out)}>({', '.join(a)})"


def _reciprocal(a: list[str], arg_dtype: torch.dtype, out: torch.dtype) -> str:
    if not arg_dtype.is_floating_point:
        raise NotImplementedError(f"the C++ backend cannot emit op 'reciprocal' on {arg_dtype}")
    return f"({literal(1, arg_dtype)} / {a[0]})"


def _abs(a: list[str], arg_dtype: torch.dtype, out: torch.dtype) -> str:
    if arg_dtype.is_floating_point:
        return f"std::abs({a[0]})"
    return f"static_cast<{ctype(out)}>({a[0]} < 0 ? -{a[0]} : {a[0]})"


def _float_test(name: str) -> CppRule:
    """``std::isnan``/``std::isinf``: always false for integers."""
    return lambda a, t, _out: f"std::{name}({a[0]})" if t.is_floating_point else "false"


RULES.update({op: _infix(symbol) for op, symbol in _INFIX.items()})
RULES.update({op: _std(op) for op in _FLOAT_FUNCS})
RULES.update({
    "neg": lambda a, _t, out: f"static_cast<{ctype(out)}>(-{a[0]})",
    "reciprocal": _reciprocal,
    "rsqrt": lambda a, t, _out: f"({literal(1, t)} / std::sqrt({a[0]}))",
    "sigmoid": lambda a, _t, _out: f"ember_sigmoid({a[0]})",
    # the prelude's special functions (codegen/cpp/special_math.py)
    "erfinv": lambda a, _t, _out: f"ember_erfinv({a[0]})",
    "digamma": lambda a, _t, _out: f"ember_digamma({a[0]})",
    "trigamma": lambda a, _t, _out: f"ember_trigamma({a[0]})",
    "round": lambda a, _t, _out: f"std::nearbyint({a[0]})",
    "sign": lambda a, _t, _out: f"ember_sign({a[0]})",
    "isnan": _float_test("isnan"),
    "isinf": _float_test("isinf"),
    "logical_not": lambda a, _t, _out: f"(!{a[0]})",
    "bitwise_not": lambda a, _t, out: f"static_cast<{ctype(out)}>(~{a[0]})",
    "abs": _abs,
    "maximum": _template("ember_max"),
    "minimum": _template("ember_min"),
    "where": lambda a, _t, _out: f"({a[0]} ? {a[1]} : {a[2]})",
    # Philox on (int64 key, int64 offset) -> float (see the prelude)
    "rand": lambda a, _t, _out: f"ember_rand({a[0]}, {a[1]})",
    "randn": lambda a, _t, _out: f"ember_randn({a[0]}, {a[1]})",
    "lshift": _template("ember_lshift"),
    "rshift": _template("ember_rshift"),
    "floordiv": lambda a, t, out: (
        f"{'ember_ffloordiv' if t.is_floating_point else 'ember_floordiv'}"
        f"<{ctype(out)}>({a[0]}, {a[1]})"),
    "truncdiv": _template("ember_truncdiv"),
    "remainder": lambda a, t, out: (
        f"{'ember_fremainder' if t.is_floating_point else 'ember_imod'}"
        f"<{ctype(out)}>({a[0]}, {a[1]})"),
    "fmod": _float_or_int("std::fmod", "ember_ifmod"),
    "pow": _float_or_int("std::pow", "ember_ipow"),
    "cast": lambda a, t, out: cast(a[0], t, out),
})


def compute(op: str, args: list[str], arg_dtype: torch.dtype, out: torch.dtype) -> str:
    """The C++ expression of ``op(*args)``; ``arg_dtype`` is the operands' dtype.

    Raises:
        NotImplementedError: for an op without a rule, or a dtype the backend does not
            support.
    """
    ctype(out)  # NOTE: raises for an unsupported result dtype, whatever the op
    rule = RULES.get(op)
    if rule is None:
        raise NotImplementedError(f"the C++ backend cannot emit op {op!r} on {arg_dtype}")
    return rule(args, arg_dtype, out)


def _minmax_init(op: str) -> Callable[[torch.dtype, str], str]:
    def init(dtype: torch.dtype, acc: str) -> str:
        if dtype == torch.bool:
            return "false" if op == "max" else "true"
        if dtype.is_floating_point:
            inf = f"std::numeric_limits<{acc}>::infinity()"
            return f"-{inf}" if op == "max" else inf
        return (f"std::numeric_limits<{acc}>::lowest()" if op == "max" else
                f"std::numeric_limits<{acc}>::max()")
    return init


#: loop-IR reduction op -> the initial value of its accumulator, from the result dtype and
#: the accumulator's C++ type (argmax/argmin: the value slot; the index starts at -1);
#: one entry per op of ``loop_ir.REDUCTION_OPS`` (tests/test_loop_ir_ops.py)
REDUCTION_INITS: dict[str, Callable[[torch.dtype, str], str]] = {
    "sum": lambda _d, _acc: "0",
    "prod": lambda _d, _acc: "1",
    "max": _minmax_init("max"),
    "min": _minmax_init("min"),
    "argmax": lambda _d, _acc: "0",
    "argmin": lambda _d, _acc: "0",
    "any": lambda _d, _acc: "false",
    "all": lambda _d, _acc: "true",
    "m2": lambda _d, _acc: "0",  # with its mean and count (accumulators.py)
}


def reduction_init(op: str, dtype: torch.dtype, acc: str) -> str:
    """The initial accumulator value of reduction ``op`` (:data:`REDUCTION_INITS`).

    Raises:
        NotImplementedError: for a reduction op without a rule.
    """
    init = REDUCTION_INITS.get(op)
    if init is None:
        raise NotImplementedError(f"the C++ backend cannot emit reduction {op!r}")
    return init(dtype, acc)


def bit_select(args: list[str], out: torch.dtype) -> str:
    """``where(*args)`` on float/double as integer bit selects (``ember_select`` in the
    prelude), for a select that feeds a libmvec call (see ``MATH_SELECTS`` in kernel.py)."""
    t = ctype(out)
    return f"ember_select({args[0]}, static_cast<{t}>({args[1]}), static_cast<{t}>({args[2]}))"


def cast(value: str, src: torch.dtype, dst: torch.dtype) -> str:
    """Convert ``value`` from ``src`` to ``dst``."""
    if src == dst:
        return value
    if src in LOWP:
        fn = "ember_half_to_float" if src == torch.float16 else "ember_bf16_to_float"
        return cast(f"{fn}({value})", torch.float32, dst)
    if dst in LOWP:
        fn = "ember_float_to_half" if dst == torch.float16 else "ember_float_to_bf16"
        return f"{fn}({cast(value, src, torch.float32)})"
    if dst == torch.bool:
        return f"({value} != 0)"
    return f"static_cast<{ctype(dst)}>({value})"
