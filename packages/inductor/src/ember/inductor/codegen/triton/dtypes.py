"""torch dtypes as Triton sees them: in kernel code (``tl.float32``) and in signatures
(``*fp32`` for a pointer argument)."""

from __future__ import annotations

import math

import torch

# torch dtype -> (tl type name, signature element name)
_TRITON_TYPES: dict[torch.dtype, tuple[str, str]] = {
    torch.float32: ("tl.float32", "fp32"),
    torch.float16: ("tl.float16", "fp16"),
    torch.bfloat16: ("tl.bfloat16", "bf16"),
    torch.float64: ("tl.float64", "fp64"),
    torch.int8: ("tl.int8", "i8"),
    torch.int16: ("tl.int16", "i16"),
    torch.int32: ("tl.int32", "i32"),
    torch.int64: ("tl.int64", "i64"),
    torch.uint8: ("tl.uint8", "u8"),
    torch.bool: ("tl.int1", "i1"),
}


def _entry(dtype: torch.dtype) -> tuple[str, str]:
    try:
        return _TRITON_TYPES[dtype]
    except KeyError:
        raise NotImplementedError(f"Triton codegen does not support dtype {dtype}") from None


def tl_type(dtype: torch.dtype) -> str:
    """``tl.float32`` for torch.float32, ...

    Raises:
        NotImplementedError: for a dtype Triton kernels cannot hold (complex, float8...).
    """
    return _entry(dtype)[0]


def pointer_type(dtype: torch.dtype) -> str:
    """The signature type of a pointer to ``dtype`` elements: ``*fp32``, ``*i1``."""
    return "*" + _entry(dtype)[1]


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def is_signed_int(dtype: torch.dtype) -> bool:
    return dtype in (torch.int8, torch.int16, torch.int32, torch.int64)


def scalar_literal(value: bool | float, dtype: torch.dtype) -> str:
    """``value`` as a Triton source literal of ``dtype``'s kind (``float('inf')`` for
    infinities, ``float('nan')`` for NaN)."""
    if dtype == torch.bool:
        return "True" if value else "False"
    if not dtype.is_floating_point:
        return str(int(value))
    f = float(value)
    if math.isnan(f):
        return "float('nan')"
    if math.isinf(f):
        return "float('inf')" if f > 0 else "float('-inf')"
    return repr(f)
