"""Running generated Triton kernels without a GPU, for tests.

:func:`triton_for_cpu` makes the inductor generate Triton kernels for CPU tensors; the
runtime's Triton launcher then runs them in Triton's interpreter, because the tensors are
on the CPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from ember.inductor.codegen.backend import KernelBackend
from ember.inductor.codegen.registry import BACKENDS, register_backend
from ember.inductor.codegen.triton.backend import TritonBackend


class TritonOnCpuBackend(TritonBackend):
    """Triton code for CPU tensors, run by Triton's interpreter: Triton's code generation
    and fusion policy, the CPU's lowering policy (integer division by zero raises as
    eager does on the CPU; the interpreter adds every dtype)."""

    device_type = "cpu"
    checks_integer_division = True
    pads_unaligned_matmuls = False
    matmul_templates = False  # tests turn it on: ``triton_for_cpu(matmul_templates=True)``

    def supports_atomic_add(self, dtype: torch.dtype) -> bool:
        return True


@contextlib.contextmanager
def cpu_backend(backend: type[KernelBackend]) -> Iterator[None]:
    """Within the block, CPU graphs get kernels from ``backend`` (then the old one)."""
    saved = BACKENDS.get("cpu")
    register_backend("cpu", backend)
    try:
        yield
    finally:
        if saved is None:
            BACKENDS.pop("cpu", None)
        else:
            BACKENDS["cpu"] = saved


class TritonOnCpuTemplatesBackend(TritonOnCpuBackend):
    """:class:`TritonOnCpuBackend` with matmul templates (run by the interpreter)."""

    matmul_templates = True


def triton_for_cpu(matmul_templates: bool = False) -> contextlib.AbstractContextManager[None]:
    """Within the block, CPU graphs get Triton kernels (run by Triton's interpreter);
    ``matmul_templates``: matmuls may become template kernels as on CUDA."""
    return cpu_backend(TritonOnCpuTemplatesBackend if matmul_templates
                       else TritonOnCpuBackend)
