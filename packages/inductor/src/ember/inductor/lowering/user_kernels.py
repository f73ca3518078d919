"""User Triton kernels (``ember::triton_kernel``, captured from ``kernel[grid](...)``):
always an extern call, never fused into.

The kernel is the user's own code: the inductor fuses the ops around it but does not
look inside. The wrapper calls the operator, which launches the user's kernel object on
fresh copies of the tensors it writes (``ember.runtime.user_kernels``), and shows the
kernel's source above the call (``codegen/user_kernels.py``).
"""

from ember.inductor.lowering.registry import extern
from ember.runtime.user_kernels import TARGET

extern(TARGET)
