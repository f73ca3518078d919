"""Ops that always run as extern calls to eager ATen (not counted as fallbacks):
matrix multiplies, convolution and attention, where vendor libraries beat generated
loops.

Each reads its tensor arguments and returns fresh tensors: it writes no argument and
returns no view of one (the wrapper views their operands without autograd's view record,
``codegen/wrapper.py``'s ``_read_view``)."""

from ember.inductor.lowering.registry import extern

VENDOR_EXTERNS = (
    "aten::mm.default", "aten::addmm.default", "aten::bmm.default", "aten::baddbmm.default",
    "aten::convolution.default", "aten::convolution_backward.default",
    "aten::_scaled_dot_product_flash_attention_for_cpu.default",
    "aten::_scaled_dot_product_flash_attention.default",
    "aten::_scaled_dot_product_efficient_attention.default",
    "aten::_scaled_dot_product_cudnn_attention.default",
    "aten::scaled_dot_product_attention.default",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward.default",
    "aten::_scaled_dot_product_flash_attention_backward.default",
    "aten::_scaled_dot_product_efficient_attention_backward.default",
    "aten::_scaled_dot_product_cudnn_attention_backward.default",
)
extern(*VENDOR_EXTERNS)
