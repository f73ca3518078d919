"""The entry of Triton code generation: which writer a kernel gets, and its module.

=====================================  ============================================
kernel                                 writer
=====================================  ============================================
pointwise, or a reduction Triton runs  :class:`~.kernel_writer.KernelWriter` (one
in one program per row block           function: persistent or looped reduction)
a matmul template kernel               :class:`~.matmul_template.MatmulTemplateWriter`
(``Kernel.template``)                  (a tiled ``tl.dot``; its config is the kernel's)
a reduction whose sizes call for a     :class:`~.split_writer.SplitReductionWriter`
split (:func:`~.split_writer.wants_    (a partial and a combining function)
split`) and that is splittable
a row kernel summing columns too       :class:`~.mixed_writer.MixedReductionWriter`
(``Reduce.across``)                    (row chunks, then the column sums combined)
=====================================  ============================================
"""

from __future__ import annotations

import dataclasses

from ember.inductor.autotune import autotune_enabled
from ember.inductor.codegen.triton.block_tuning import tuned_launch_config
from ember.inductor.codegen.triton.heuristics import (
    PERSISTENT_MAX,
    LaunchConfig,
    choose_config,
    config_forced,
    next_power_of_2,
)
from ember.inductor.codegen.triton.kernel_code import TritonKernelCode
from ember.inductor.codegen.triton.kernel_writer import KernelWriter
from ember.inductor.codegen.triton.matmul_write import write_matmul_template
from ember.inductor.codegen.triton.mixed_writer import MixedReductionWriter, mixed_config
from ember.inductor.codegen.triton.reduction_layout import column_element_bytes
from ember.inductor.codegen.triton.sizes import SizeFacts
from ember.inductor.codegen.triton.split_writer import SplitReductionWriter, splittable
from ember.inductor.loop_ir import Kernel
from ember.inductor.loop_ir.across import has_across

#: a persistent reduction over a symbolic row holds a block of the range's upper bound;
#: when that is more than this many times the hint's block, the kernel loops instead
PERSISTENT_SLACK = 4


def launch_config(kernel: Kernel, facts: SizeFacts | None = None) -> LaunchConfig:
    """The tiling :func:`~.heuristics.choose_config` gives ``kernel``; symbolic sizes
    are read at their hints (``facts``), except that a reduction is persistent only when
    every row its range allows fits the block (else it loops, with the hint's block)."""
    facts = facts or SizeFacts()
    if has_across(kernel):
        return mixed_config(kernel, facts)
    numel = facts.hint(kernel.numel)
    if not kernel.is_reduction:
        return choose_config(numel)
    column_bytes = column_element_bytes(kernel)
    columns = column_bytes > 0
    config = choose_config(numel, facts.hint(kernel.reduction_numel), columns=columns,
                           element_bytes=column_bytes or 4)
    if isinstance(kernel.reduction_numel, int) or not config.persistent:
        return config
    upper = facts.upper(kernel.reduction_numel)
    if upper is not None and next_power_of_2(upper) <= config.rblock:
        return config
    if upper is not None and next_power_of_2(upper) <= min(
            PERSISTENT_MAX, PERSISTENT_SLACK * config.rblock):
        return choose_config(numel, upper, columns=columns, element_bytes=column_bytes or 4)
    return dataclasses.replace(config, persistent=False)


def writer_for(kernel: Kernel, config: LaunchConfig, facts: SizeFacts | None = None
               ) -> KernelWriter:
    """The writer of ``kernel`` under ``config`` (see the module doc)."""
    if has_across(kernel):
        return MixedReductionWriter(kernel, config, facts)
    if kernel.is_reduction and config.split > 1 and splittable(kernel):
        return SplitReductionWriter(kernel, config, facts)
    return KernelWriter(kernel, config, facts)


def generate_triton_kernel(kernel: Kernel, config: LaunchConfig | None = None,
                           facts: SizeFacts | None = None) -> TritonKernelCode:
    """Generate the Triton module for ``kernel``.

    Args:
        kernel: a loop-IR kernel.
        config: the tiling; chosen by :func:`launch_config` when None (and, when
            autotuning, timed against its neighbours: :mod:`.block_tuning`).
        facts: the hints and ranges of the kernel's size symbols (symbolic kernels:
            heuristics read the hints; without them, the runtime's fallback hint and no
            upper bounds, which is correct for every size, maybe slower).

    Raises:
        NotImplementedError: naming an op or dtype Triton codegen does not handle.
    """
    if kernel.template is not None:  # a matmul: its config was chosen with the template
        return write_matmul_template(kernel, facts)
    if config is None:
        config = launch_config(kernel, facts)
        if autotune_enabled() and not config_forced() and not has_across(kernel):
            # mode="max-autotune" (a kernel summing across its rows keeps its tiling)
            config = tuned_launch_config(kernel, config, facts or SizeFacts(), _write)
    return writer_for(kernel, config, facts).write()


def _write(kernel: Kernel, config: LaunchConfig, facts: SizeFacts) -> TritonKernelCode:
    return writer_for(kernel, config, facts).write()
