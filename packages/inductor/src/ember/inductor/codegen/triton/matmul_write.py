"""Which writer writes a matmul template kernel: the persistent TMA variant for a
``tma_`` config (:mod:`.matmul_tma_template`, which falls back to the pointer template
where the kernel does not suit it), else the pointer template (:mod:`.matmul_template`).
"""

from __future__ import annotations

from ember.inductor.codegen.triton.kernel_code import TritonKernelCode
from ember.inductor.codegen.triton.matmul_template import MatmulTemplateWriter
from ember.inductor.codegen.triton.matmul_tma_template import write_tma_template
from ember.inductor.codegen.triton.sizes import SizeFacts
from ember.inductor.loop_ir import Kernel

__all__ = ["write_matmul_template"]


def write_matmul_template(kernel: Kernel, facts: SizeFacts | None = None) -> TritonKernelCode:
    """The Triton module of the matmul template ``kernel`` (``Kernel.template`` set)."""
    if kernel.template is not None and kernel.template.config.startswith("tma_"):
        return write_tma_template(kernel, facts)
    return MatmulTemplateWriter(kernel, facts).write()
