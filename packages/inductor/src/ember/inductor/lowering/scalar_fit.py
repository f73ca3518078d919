"""Whether a Python number fits the dtype an op converts it to.

Eager torch converts the number of ``fill_``, ``full``, ``clamp``, ``hardtanh``,
``scalar_tensor`` (and ``masked_fill``/``where`` with a number, which decompose to them)
with a checked conversion, and raises "value cannot be converted to type uint8_t without
overflow" when it does not fit: ``uint8.clamp(max=300)``, ``int8.fill_(200)``,
``float16.fill_(1e6)``. A kernel would wrap it (300 becomes 44) and give every element the
wrapped value. Such an op is not lowered: it runs as an extern call, which raises as eager
does. The rule is c10's ``overflows`` (not strict about unsigned types: a negative
integer down to ``-max`` wraps, ``uint8.fill_(-1)`` gives 255 in eager too).
"""

from __future__ import annotations

import math

import torch


def overflows(value: object, dtype: torch.dtype) -> bool:
    """Whether eager's checked conversion of the Python number ``value`` to ``dtype``
    raises (False for values it does not check: symbolic ints, complex numbers, bool
    and complex dtypes)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if dtype == torch.bool or dtype.is_complex:
        return False
    if dtype.is_floating_point:
        if isinstance(value, float) and not math.isfinite(value):
            return False  # inf and NaN convert to every float dtype
        return abs(value) > torch.finfo(dtype).max
    info = torch.iinfo(dtype)
    if isinstance(value, float):
        return math.isnan(value) or not info.min <= value <= info.max
    if info.min == 0:  # unsigned: a negative value down to -max wraps
        return value > info.max or value < -info.max
    return not info.min <= value <= info.max


def as_converted(value: object, dtype: torch.dtype) -> object:
    """``value`` as eager's conversion gives it: a negative integer converted to an
    unsigned dtype wraps (``-5`` as ``uint8`` is 251); every other value as it is. (A
    Triton literal of ``-5`` for ``uint8`` does not compile.)"""
    if (isinstance(value, int) and not isinstance(value, bool) and value < 0
            and not dtype.is_floating_point and not dtype.is_complex
            and dtype != torch.bool and torch.iinfo(dtype).min == 0):
        return value % (1 << torch.iinfo(dtype).bits)
    return value
