"""The Triton kernel backend: loop-IR kernels for CUDA tensors."""

from __future__ import annotations

from ember.inductor.codegen.backend import KernelBackend, KernelSource
from ember.inductor.codegen.triton.kernel_writer import generate_triton_kernel
from ember.inductor.loop_ir import Kernel


class TritonBackend(KernelBackend):
    """Generates one Triton module per kernel (see :mod:`.kernel_writer`).

    The :class:`KernelSource` ``meta`` holds the static launch data (signature,
    block sizes, grid, warps) that ``ember.runtime.compiled.triton_launcher`` reads.
    """

    device_type = "cuda"

    def generate(self, kernel: Kernel) -> KernelSource:
        code = generate_triton_kernel(kernel)
        return KernelSource(
            lang="triton", name=kernel.name, source=code.source, entry=code.name,
            meta=code.meta(),
        )
