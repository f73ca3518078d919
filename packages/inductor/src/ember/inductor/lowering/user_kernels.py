"""User Triton kernels (``ember::triton_kernel``, captured from ``kernel[grid](...)``):
always an extern call, never fused into.

The kernel is the user's own code: the inductor fuses the ops around it but does not
look inside. The wrapper calls the operator, which launches the user's kernel object on
fresh copies of the tensors it writes (``ember.runtime.user_kernels``), and shows the
kernel's source above the call (``codegen/user_kernels.py``).

A kernel indexes its tensors with the strides the user passed as ints at capture, so
each tensor must reach it in exactly the traced layout: the lowering pass
:func:`user_kernel_operands` stores a computed operand (or a view the lowering made of a
``clone``/``contiguous``) in a buffer with the traced strides.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ember.inductor.lowering.layout import in_traced_layout
from ember.inductor.lowering.registry import extern
from ember.runtime.user_kernels import TARGET

if TYPE_CHECKING:  # NOTE: lowering.context imports buffers, which imports this package
    from ember.inductor.lowering.context import ExternRequest, LoweringContext

__all__ = ["user_kernel_operands"]

extern(TARGET)


def user_kernel_operands(ctx: LoweringContext, call: ExternRequest) -> ExternRequest:
    """Lowering pass: each tensor operand of a user Triton kernel in the sizes and
    strides the program traced for it (a Lazy value, or a stored view with other
    strides, is computed into a buffer of that layout). Other calls are returned as
    they are."""
    if call.node.target != TARGET or len(call.args) < 2:
        return call
    refs, values = call.node.args[1], call.args[1]
    if not isinstance(refs, tuple) or not isinstance(values, tuple):
        return call
    laid_out: list[object] = []
    seen: dict[object, object] = {}  # one tensor passed twice stays one buffer
    for ref, value in zip(refs, values):
        if ref in seen:
            laid_out.append(seen[ref])
            continue
        seen[ref] = in_traced_layout(ctx, ref, value)
        laid_out.append(seen[ref])
    return dataclasses.replace(call, args=(call.args[0], tuple(laid_out), *call.args[2:]))
