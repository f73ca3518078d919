"""The lowering passes: named rewrites of an extern call (matmul, convolution, ...)
before the lowering emits it, run in the order of :data:`EXTERN_PASSES`.

A pass takes the lowering context and an :class:`~.context.ExternRequest` (the node,
its lowered arguments and result metas) and returns the request, rewritten or as it is,
or the node's lowered value (a tuple for several results) when it emitted the call
itself (then later passes do not
run). They run on ops lowered to extern calls on purpose (``lowering/externs.py``), not
on fallbacks, which get one rewrite only: their operands in the layouts the program
traced for them (``layout_passes.in_traced_layouts``), as eager gave them to the op.
"""

from __future__ import annotations

from collections.abc import Callable

from ember.inductor.lowering.context import ExternRequest, LoweringContext
from ember.inductor.lowering.layout_passes import (
    channels_last_convolution,
    channels_last_convolution_backward,
    in_traced_layouts,
    traced_layout_operands,
    transposed_matmul_operands,
)
from ember.inductor.lowering.matmul_padding import pad_unaligned_matmul
from ember.inductor.lowering.matmul_template import matmul_template
from ember.inductor.lowering.user_kernels import user_kernel_operands
from ember.inductor.lowering.values import Stored

ExternPass = Callable[[LoweringContext, ExternRequest],
                      "ExternRequest | Stored | tuple[Stored, ...]"]

EXTERN_PASSES: list[tuple[str, ExternPass]] = [
    ("matmul_template", matmul_template),
    ("pad_unaligned_matmul", pad_unaligned_matmul),
    ("channels_last_convolution", channels_last_convolution),
    ("channels_last_convolution_backward", channels_last_convolution_backward),
    ("transposed_matmul_operands", transposed_matmul_operands),
    ("traced_layout_operands", traced_layout_operands),
    ("user_kernel_operands", user_kernel_operands),
]

__all__ = ["EXTERN_PASSES", "ExternPass", "in_traced_layouts"]
