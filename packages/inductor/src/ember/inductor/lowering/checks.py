"""Run-time checks that make a generated kernel fail where eager raises: an index out of
range (gather, index_select, embedding, ``x[idx]``, index_put, scatter, index_add) and,
on CPU, integer division by zero.

A kernel cannot raise. It records a failed check into the graph's *error buffer*
(:data:`ERROR_BUFFER`, int64, two slots per check, zeroed by the wrapper at the start of
each call): a masked store of 1 into slot ``2k`` and of the offending value into slot
``2k + 1`` where check ``k`` fails. Both stores are loop-IR ``Store`` statements with a
mask, so the codegens need nothing new; a check never reads the buffer, so fusion and
store forwarding are unaffected. The wrapper (``codegen/wrapper.py``) tests the buffer
after the kernels that may set it and raises the exception eager raises, with a message
naming the op, the bad value and the bound.

A check whose condition is provably false at compile time (``value_ranges``: the index
comes from ``arange`` or ``argmax`` over the indexed dim, a constant, a literal divisor)
is not emitted at all: it costs nothing at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from ember.inductor.loop_ir import Int
from ember.inductor.lowering.builder import BodyBuilder

if TYPE_CHECKING:
    from ember.inductor.lowering.graph_lowering import GraphLowering

#: the wrapper variable (and kernel argument) of a graph's error buffer
ERROR_BUFFER = "kernel_errors"


@dataclass(frozen=True)
class RuntimeCheck:
    """Check ``slot``: when it fails, the wrapper raises ``exception`` (a builtin name)
    with ``message`` formatted with ``value=`` the offending value."""

    slot: int
    exception: str
    message: str


def new_check(ctx: GraphLowering, exception: str, message: str) -> RuntimeCheck:
    """Register a check of the graph ``ctx`` lowers (one per op and checked operand)."""
    from ember.inductor.lowering.lowered_graph import BufferInfo

    check = RuntimeCheck(len(ctx.checks), exception, message)
    ctx.checks.append(check)
    n = 2 * len(ctx.checks)
    ctx.buffers[ERROR_BUFFER] = BufferInfo(ERROR_BUFFER, torch.int64, (n,), (1,), "errors")
    return check


def record_failure(b: BodyBuilder, check: RuntimeCheck, failed: str, value: str) -> None:
    """Emit the stores that record ``check`` as failed where the bool value ``failed``
    holds (and the builder's current mask does); ``value`` (an integer) is reported."""
    mask = b.current_mask
    if mask is not None:
        failed = b.compute("logical_and", mask, failed)
    i64 = torch.int64
    b.scatter(ERROR_BUFFER, Int(2 * check.slot), b.cast(failed, i64), failed)
    b.scatter(ERROR_BUFFER, Int(2 * check.slot + 1), b.cast(value, i64), failed)
