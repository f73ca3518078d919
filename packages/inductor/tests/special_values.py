"""Special-value inputs for pointwise ops (issue 11, item 6): ±0, ±inf, NaN, denormals,
the largest and smallest normal numbers, and the integer extremes, plus a few ordinary
values; and the comparison that says whether a result matches eager's "bitwise-ish".

Used by test_special_values.py, which runs every pointwise op of the lowering table on
them (C++ and Triton's interpreter) against eager.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

FLOAT_DTYPES = (torch.float32, torch.bfloat16)
INT_DTYPES = (torch.int32, torch.int64)


def float_specials(dtype: torch.dtype) -> list[float]:
    """Special float values representable in ``dtype`` (and a few ordinary ones)."""
    info = torch.finfo(dtype)
    denormal = info.tiny * info.eps  # the smallest positive subnormal
    return [0.0, -0.0, math.inf, -math.inf, math.nan, denormal, -denormal, info.tiny,
            -info.tiny, info.max, -info.max, 1.0, -1.0, 0.5, -2.5, 3.0, 88.75, -104.0]


def int_specials(dtype: torch.dtype) -> list[int]:
    """Integer extremes of ``dtype`` and small values of both signs."""
    info = torch.iinfo(dtype)
    return [0, 1, -1, 2, -3, 7, info.min, info.max, info.min + 1, info.max - 1]


def specials(dtype: torch.dtype) -> torch.Tensor:
    """A 1-d tensor of the special values of ``dtype``."""
    values: list[float] | list[int] = (
        float_specials(dtype) if dtype.is_floating_point else int_specials(dtype))
    return torch.tensor(values, dtype=dtype)


def pairs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Two 1-d tensors holding every (a, b) pair of special values, for binary ops."""
    v = specials(dtype)
    n = v.numel()
    return v.repeat_interleave(n), v.repeat(n)


def scalars(dtype: torch.dtype) -> list[float] | list[int]:
    """Special Python scalars for the ``Scalar`` operand of binary ops."""
    if dtype.is_floating_point:
        return [0.0, -0.0, math.inf, -math.inf, math.nan, 2.5]
    info = torch.iinfo(dtype)
    return [0, -1, 3, info.max]


# Tolerance for finite, nonzero results (math functions may differ by an ulp or two
# between glibc/libdevice and eager's SLEEF); NaN, infinities and signed zeros are exact.
TOL = {torch.float32: (1e-5, 1e-6), torch.bfloat16: (8e-3, 1e-5)}


def _bad(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Where ``actual`` differs from ``expected`` (same dtype and shape)."""
    if not expected.dtype.is_floating_point:
        return actual != expected
    a, e = actual.double(), expected.double()
    rtol, atol = TOL.get(expected.dtype, (1e-5, 1e-6))
    tiny = torch.finfo(expected.dtype).tiny
    same_class = (a.isnan() == e.isnan()) & ((a == e) | ~(a.isinf() | e.isinf()))
    # NOTE: a denormal result against a zero is a flush-to-zero difference between math
    # libraries (eager's log1p of a denormal is 0.0), not a special-value error; two
    # zeros must have the same sign
    both_zero = (a == 0) & (e == 0)
    signed_zero_ok = ~both_zero | (a.signbit() == e.signbit())
    flushed = ((a == 0) & (e.abs() < tiny)) | ((e == 0) & (a.abs() < 2 * tiny))
    finite = ~(e.isnan() | e.isinf() | both_zero)
    close = ~finite | flushed | ((a - e).abs() <= atol + rtol * e.abs())
    return ~(same_class & signed_zero_ok & close)


def mismatch(actual: torch.Tensor, expected: torch.Tensor, inputs: list[torch.Tensor],
             one_by_one: Callable[..., torch.Tensor] | None = None) -> str | None:
    """None when ``actual`` matches ``expected``: same dtype and shape; for floats the
    same NaNs, the same infinities, the same signed zeros, other values within
    :data:`TOL`; integers and bools exactly. An element that differs may instead match
    ``one_by_one`` (eager) run on that element alone: eager's vectorized CPU kernels and
    its scalar loop disagree on some special values (gelu's sign of zero below -10, fmod
    of a huge quotient: NaN in SLEEF), and either is eager. Else a description of the
    first differences, with the inputs at those positions."""
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        return f"got {actual.dtype} {list(actual.shape)}, eager {expected.dtype} " \
               f"{list(expected.shape)}"
    bad = _bad(actual, expected)
    if one_by_one is not None and bad.any():
        for i in bad.nonzero().flatten().tolist():
            alone = one_by_one(*[x.flatten()[i:i + 1].clone() for x in inputs])
            if not _bad(actual.flatten()[i:i + 1], alone.flatten()).any():
                bad.view(-1)[i] = False
    if not bad.any():
        return None
    where = bad.nonzero().flatten()[:4].tolist()
    parts = []
    for i in where:
        args = ", ".join(f"{x.flatten()[i].item()!r}" for x in inputs)
        parts.append(f"f({args}) = {actual.flatten()[i].item()!r}, "
                     f"eager {expected.flatten()[i].item()!r}")
    return f"{int(bad.sum())} of {bad.numel()} differ: " + "; ".join(parts)
