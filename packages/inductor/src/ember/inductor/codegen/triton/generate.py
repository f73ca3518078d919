"""The entry of Triton code generation: which writer a kernel gets, and its module.

=====================================  ============================================
kernel                                 writer
=====================================  ============================================
pointwise, or a reduction Triton runs  :class:`~.kernel_writer.KernelWriter` (one
in one program per row block           function: persistent or looped reduction)
a reduction whose sizes call for a     :class:`~.split_writer.SplitReductionWriter`
split (:func:`~.split_writer.wants_    (a partial and a combining function)
split`) and that is splittable
=====================================  ============================================
"""

from __future__ import annotations

from ember.inductor.codegen.triton.heuristics import LaunchConfig, choose_config
from ember.inductor.codegen.triton.kernel_writer import (
    KernelWriter,
    TritonKernelCode,
    reduces_columns,
)
from ember.inductor.codegen.triton.split_writer import SplitReductionWriter, splittable
from ember.inductor.loop_ir import Kernel


def launch_config(kernel: Kernel) -> LaunchConfig:
    """The tiling :func:`~.heuristics.choose_config` gives ``kernel``."""
    if kernel.is_reduction:
        return choose_config(kernel.numel, kernel.reduction_numel,
                             columns=reduces_columns(kernel))
    return choose_config(kernel.numel)


def writer_for(kernel: Kernel, config: LaunchConfig) -> KernelWriter:
    """The writer of ``kernel`` under ``config`` (see the module doc)."""
    if kernel.is_reduction and config.split > 1 and splittable(kernel):
        return SplitReductionWriter(kernel, config)
    return KernelWriter(kernel, config)


def generate_triton_kernel(kernel: Kernel, config: LaunchConfig | None = None) -> TritonKernelCode:
    """Generate the Triton module for ``kernel``.

    Args:
        kernel: a loop-IR kernel.
        config: the tiling; chosen by :func:`launch_config` when None.

    Raises:
        NotImplementedError: naming an op or dtype Triton codegen does not handle.
    """
    if config is None:
        config = launch_config(kernel)
    return writer_for(kernel, config).write()
