"""The extern call a matmul template becomes when it ends up idle.

A template chosen only for the pointwise consumers expected to fuse into it
(``MatmulBuffer.needs_epilogue``) may be left with none fused by the scheduler; then the
matmul runs as the extern call (``idle_templates.py``). Which call is decided here, while
the template is lowered: :func:`lowers_alike` says whether lowering the matmul as the
extern would have done nothing else differently, and :func:`extern_call` builds that
call (``MatmulBuffer.extern``). The scheduler's template step is then replaced by the
call, and the program is the one a lowering with the matmul as an extern gives: the same
buffers, under the same names (the call's result takes the template's buffer), the same
kernels.

The extern's lowering (:data:`~.extern_passes.EXTERN_PASSES` after ``matmul_template``)
differs from the template's when

- ``pad_unaligned_matmul`` would pad an operand (never for a template chosen for its
  epilogue alone: a pad makes the template certain, ``matmul_template``);
- ``transposed_matmul_operands`` would store a computed operand transposed, or as a view
  of the value it transposes (the template stores it row-major, ``_prologue``);
- the bias is computed (the extern stores it; the template computes it in its epilogue);
- the traced result is not row-major (the template's is).

Then :func:`lowers_alike` says no, and an idle template sends its graph to a second
lowering with the matmul as an extern call (``GraphLowering(extern_matmuls=...)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember.inductor.buffers import ExternCall
from ember.inductor.loop_ir.symbolic_index import from_ir, stride_from_ir
from ember.inductor.lowering.context import ExternRequest, LoweringContext
from ember.inductor.lowering.extern_args import extern_reads
from ember.inductor.lowering.layout_passes import keeps_matmul_operand
from ember.inductor.lowering.matmul_padding import plan_padding
from ember.inductor.lowering.values import Lazy, Stored, contiguous_strides
from ember.runtime.ir import TensorMeta


def lowers_alike(ctx: LoweringContext, call: ExternRequest, bias: object,
                 sizes: Sequence[object]) -> bool:
    """Whether the extern's lowering of ``call`` (a matmul the template lowers to a result
    of ``sizes``, with ``bias`` added in its epilogue) would store nothing the template's
    does not (module doc). Asked before the template stores its operands; stores
    nothing."""
    meta = call.metas[0] if len(call.metas) == 1 else None
    if isinstance(bias, Lazy) or not isinstance(meta, TensorMeta):
        return False
    try:
        if plan_padding(ctx, call) is not None or not all(
                keeps_matmul_operand(ctx, a) for a in call.args):
            return False
    except TypeError:  # a pass written for static sizes: the extern's lowering differs
        return False
    traced = tuple(from_ir(s) for s in meta.sizes)
    strides = tuple(stride_from_ir(s) for s in meta.strides)
    return traced == tuple(sizes) and strides == contiguous_strides(traced)


def extern_call(ctx: LoweringContext, call: ExternRequest, operands: dict[int, Stored],
                name: str) -> ExternCall:
    """The extern call of ``call`` with result ``name``, as the lowering emits it
    (``GraphLowering._emit_extern``), its arguments at the positions in ``operands`` the
    operands the template stored. Only for a ``call`` :func:`lowers_alike` accepted: its
    other arguments are stored tensors and constants, which become arguments without
    storing anything."""
    meta = call.metas[0]
    assert isinstance(meta, TensorMeta)
    values: list[Any] = [operands.get(i, a) for i, a in enumerate(call.args)]
    args = [ctx.extern_arg(a) for a in values]
    kwargs = {k: ctx.extern_arg(v) for k, v in call.kwargs.items()}
    sizes = tuple(from_ir(s) for s in meta.sizes)
    strides = tuple(stride_from_ir(s) for s in meta.strides)
    return ExternCall(call.node.target, args, kwargs, [name], [(meta.dtype, sizes, strides)],
                      extern_reads(args, kwargs), False, False, (call.node.name,))


__all__ = ["extern_call", "lowers_alike"]
