"""C++ expressions for loop-IR pointwise ops and literals."""

from __future__ import annotations

import math

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
                "acosh", "atanh", "erf", "erfc", "floor", "ceil", "trunc", "atan2"}


def compute(op: str, args: list[str], arg_dtype: torch.dtype, out: torch.dtype) -> str:
    """The C++ expression of ``op(*args)``; ``arg_dtype`` is the operands' dtype."""
    is_float = arg_dtype.is_floating_point
    t = ctype(out)
    if op in _INFIX:
        expr = f"({args[0]} {_INFIX[op]} {args[1]})"
        return expr if out == torch.bool else f"static_cast<{t}>{expr}"
    if op in _FLOAT_FUNCS:
        return f"std::{op}({', '.join(args)})"
    a = args[0]
    simple = {
        "neg": f"static_cast<{t}>(-{a})",
        "reciprocal": f"({literal(1, arg_dtype)} / {a})" if is_float else "",
        "rsqrt": f"({literal(1, arg_dtype)} / std::sqrt({a}))",
        "sigmoid": f"ember_sigmoid({a})",
        "round": f"std::nearbyint({a})",
        "sign": f"ember_sign({a})",
        "isnan": f"std::isnan({a})" if is_float else "false",
        "isinf": f"std::isinf({a})" if is_float else "false",
        "logical_not": f"(!{a})",
        "bitwise_not": f"static_cast<{t}>(~{a})",
        "abs": f"std::abs({a})" if is_float else f"static_cast<{t}>({a} < 0 ? -{a} : {a})",
    }
    if simple.get(op):
        return simple[op]
    if op in ("maximum", "minimum"):
        name = "ember_max" if op == "maximum" else "ember_min"
        return f"{name}<{t}>({args[0]}, {args[1]})"
    if op == "where":
        return f"({args[0]} ? {args[1]} : {args[2]})"
    if op in ("rand", "randn"):
        # Philox on (int64 key, int64 offset) -> float (see the prelude)
        return f"ember_{op}({args[0]}, {args[1]})"
    if op in ("lshift", "rshift"):
        return f"ember_{op}<{t}>({args[0]}, {args[1]})"
    if op == "floordiv":
        fn = "ember_ffloordiv" if is_float else "ember_floordiv"
        return f"{fn}<{t}>({args[0]}, {args[1]})"
    if op == "truncdiv":
        return f"ember_truncdiv<{t}>({args[0]}, {args[1]})"
    if op == "remainder":
        fn = "ember_fremainder" if is_float else "ember_imod"
        return f"{fn}<{t}>({args[0]}, {args[1]})"
    if op == "fmod":
        return (f"std::fmod({args[0]}, {args[1]})" if is_float
                else f"ember_ifmod<{t}>({args[0]}, {args[1]})")
    if op == "pow":
        return (f"std::pow({args[0]}, {args[1]})" if is_float
                else f"ember_ipow<{t}>({args[0]}, {args[1]})")
    raise NotImplementedError(f"the C++ backend cannot emit op {op!r} on {arg_dtype}")


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
