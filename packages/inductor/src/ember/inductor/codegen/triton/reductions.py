"""Reduction ops in Triton: identities, elementwise accumulation, the final row reduce.

A reduction is reduced over axis 1 of an ``[XBLOCK, RBLOCK]`` tile. Masked-out lanes hold
the op's identity. ``max``/``min`` propagate NaN like torch; ``argmax``/``argmin`` keep
the first index of the extreme value (NaN counting as extreme), through the combine
functions in :data:`HELPERS`, which a kernel module defines when it uses them.

NOTE: generated code calls only Triton *builtins* plus helpers it defines itself, never
the ``@triton.jit`` functions of ``triton.language.standard`` (``tl.sum``, ``tl.max``,
``tl.zeros_like``, ``tl.sigmoid``): those are decorated once, when Triton is imported, so
in a process that imported Triton in GPU mode they cannot run under the interpreter (and
vice versa). Our own helpers are decorated when the kernel module is imported, in the
mode it is loaded for.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from ember.inductor.codegen.triton import welford
from ember.inductor.codegen.triton.dtypes import is_float, scalar_literal

HELPERS: dict[str, str] = {
    "_ember_add": '''
@triton.jit
def _ember_add(a, b):
    return a + b
''',
    "_ember_max": '''
@triton.jit
def _ember_max(a, b):
    return tl.maximum(a, b)
''',
    "_ember_min": '''
@triton.jit
def _ember_min(a, b):
    return tl.minimum(a, b)
''',
    "_ember_max_nan": '''
@triton.jit
def _ember_max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
''',
    "_ember_min_nan": '''
@triton.jit
def _ember_min_nan(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
''',
    "_ember_mul": '''
@triton.jit
def _ember_mul(a, b):
    return a * b
''',
    welford.COMBINE: welford.HELPER_SOURCE,
    "_ember_argmax": '''
@triton.jit
def _ember_argmax(v1, i1, v2, i2):
    # NOTE: NaN is the largest value; ties keep the smaller index (torch's first match).
    nan1 = v1 != v1
    nan2 = v2 != v2
    better = (v1 > v2) | (nan1 & (nan2 == 0))
    same = (v1 == v2) | (nan1 & nan2)
    take1 = better | (same & (i1 < i2))
    return tl.where(take1, v1, v2), tl.where(take1, i1, i2)
''',
    "_ember_argmin": '''
@triton.jit
def _ember_argmin(v1, i1, v2, i2):
    # NOTE: NaN is the extreme value; ties keep the smaller index (torch's first match).
    nan1 = v1 != v1
    nan2 = v2 != v2
    better = (v1 < v2) | (nan1 & (nan2 == 0))
    same = (v1 == v2) | (nan1 & nan2)
    take1 = better | (same & (i1 < i2))
    return tl.where(take1, v1, v2), tl.where(take1, i1, i2)
''',
}


def identity(op: str, dtype: torch.dtype) -> str:
    """The identity of reduction ``op`` on ``dtype`` values, as Triton source (``m2``:
    of each part of its state, :mod:`.welford`)."""
    if op in ("sum", "m2"):
        return "0"
    if op == "prod":
        return "1"
    if op == "any":
        return "False"
    if op == "all":
        return "True"
    if dtype == torch.bool:
        return "False" if op in ("max", "argmax") else "True"
    if is_float(dtype):
        return scalar_literal(float("-inf") if op in ("max", "argmax") else float("inf"), dtype)
    info = torch.iinfo(dtype)
    return scalar_literal(info.min if op in ("max", "argmax") else info.max, dtype)


def _minmax_helper(op: str) -> Callable[[torch.dtype], str]:
    def helper(dtype: torch.dtype) -> str:
        if dtype == torch.bool:
            return "_ember_max" if op == "max" else "_ember_min"
        return f"_ember_{op}_nan" if is_float(dtype) else f"_ember_{op}"
    return helper


#: loop-IR reduction op -> the combine helper (of :data:`HELPERS`) it reduces with, given
#: the dtype of the reduced values; one entry per op of ``loop_ir.REDUCTION_OPS``
#: (tests/test_loop_ir_ops.py)
COMBINE_HELPERS: dict[str, Callable[[torch.dtype], str]] = {
    "sum": lambda _d: "_ember_add",
    "prod": lambda _d: "_ember_mul",
    "max": _minmax_helper("max"),
    "min": _minmax_helper("min"),
    "argmax": lambda _d: "_ember_argmax",
    "argmin": lambda _d: "_ember_argmin",
    "any": lambda _d: "_ember_max",
    "all": lambda _d: "_ember_min",
    "m2": lambda _d: welford.COMBINE,
}


def helper_for(op: str, dtype: torch.dtype) -> str:
    """The combine helper ``op`` needs on ``dtype`` values (:data:`COMBINE_HELPERS`).

    Raises:
        NotImplementedError: for a reduction op without a rule.
    """
    helper = COMBINE_HELPERS.get(op)
    if helper is None:
        raise NotImplementedError(f"Triton codegen has no rule for the reduction {op!r}")
    return helper(dtype)


def accumulate(op: str, dtype: torch.dtype, acc: str, value: str) -> str:
    """Elementwise ``acc (op) value`` (not argmax/argmin, which carry an index)."""
    if op == "sum":
        return f"{acc} + {value}"
    if op == "prod":
        return f"{acc} * {value}"
    if op == "any" or (op == "max" and dtype == torch.bool):
        return f"{acc} | {value}"
    if op == "all" or (op == "min" and dtype == torch.bool):
        return f"{acc} & {value}"
    return f"{helper_for(op, dtype)}({acc}, {value})"


def row_reduce(op: str, dtype: torch.dtype, tile: str) -> str:
    """Reduce ``tile`` over axis 1 into an ``[XBLOCK, 1]`` value (not argmax/argmin)."""
    helper = helper_for(op, dtype)
    if op in ("any", "all") or dtype == torch.bool:
        return f"(tl.reduce({tile}.to(tl.int8), 1, {helper}) > 0)[:, None]"
    return f"tl.reduce({tile}, 1, {helper})[:, None]"
