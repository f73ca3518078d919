"""The Triton kernel backend: loop-IR kernels for CUDA tensors, and CUDA's device policy."""

from __future__ import annotations

import torch
from ember.inductor.codegen.backend import KernelBackend, KernelSource, MatmulProblem
from ember.inductor.codegen.triton.combo import combo_parts
from ember.inductor.codegen.triton.generate import generate_triton_kernel
from ember.inductor.codegen.triton.matmul_choice import choose_matmul
from ember.inductor.codegen.triton.matmul_tma_template import descriptor_buffers
from ember.inductor.codegen.triton.mixed_writer import mixable
from ember.inductor.codegen.triton.split_writer import splittable, wants_split
from ember.inductor.loop_ir import Kernel, Load, MatmulTemplate, Store
from ember.inductor.loop_ir.across import has_across

#: dtypes Triton has atomic adds for (``tl.atomic_add``, an accumulating scatter's store)
ATOMIC_ADD_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64,
                               torch.int32, torch.int64})


class TritonBackend(KernelBackend):
    """Generates one Triton module per kernel (see :mod:`.generate`).

    The :class:`KernelSource` ``meta`` holds the static launch data (signature,
    block sizes, grid, warps) that ``ember.runtime.compiled.triton_launcher`` reads.
    Device policy: atomic adds only in :data:`ATOMIC_ADD_DTYPES`; no integer division
    checks (CUDA eager does not raise); a split reduction stays splittable
    (:meth:`can_fuse`).
    """

    device_type = "cuda"
    checks_integer_division = False
    pads_unaligned_matmuls = True
    max_scan_length = 1024
    matmul_templates = True
    #: an optimizer step's updates fuse side by side, one kernel per parameter shape
    #: (host scalars let a CUDA Adam step fuse whole: ``lowering/host_scalars.py``):
    #: unbounded, hundreds of same-shaped parameters would make one kernel of thousands
    #: of pointer arguments (CUDA's classic limit is 4 KB of them) and statements, slow
    #: to compile. 256 pointers (2 KB) hold 32 parameters' Adam updates (8 buffers each).
    max_kernel_buffers: int | None = 256
    #: independent updates of large arrays fuse side by side only up to 24 buffers a
    #: kernel (over ``HORIZONTAL_LIMIT_ELEMENTS``): one program streaming every parameter
    #: of a step is slow. H200, AdamW over 24 weights of 2048x2048 (+24 biases), the
    #: step's GPU time by this limit (``tools/gpu/sweep_horizontal.py``, 2026-12-02):
    #: unbounded 1.84 ms (two kernels), 8: 0.88 ms (26 launches), 12: 0.77, 16: 0.757,
    #: 24: 0.756 (7 launches), 32: 0.763; torch.compile's combo kernels 0.694 ms.
    horizontal_buffer_limit: int | None = 24
    entries_named_by_graph = True
    #: Triton's compile time grows faster than a kernel's size: HF BERT's training
    #: backward fused its 24 recomputed layer norms into one kernel of 581 statements,
    #: 8.7 s to compile for sm_90 (a third of the program's kernel builds), where one of
    #: 282 took 1.4 s and most take under 0.5 s (this machine's CPU, Triton's sm_90
    #: target, ``tools/gpu/triton_compile_times.py``). Past this many statements a chain
    #: becomes several kernels, storing the values that cross (one row of activations
    #: each, microseconds on the H200).
    max_kernel_statements: int | None = 256
    #: a row kernel sums columns too where whole rows fit its registers
    #: (:func:`.mixed_writer.mixable`)
    across_reductions = True

    def generate(self, kernel: Kernel) -> KernelSource:
        code = generate_triton_kernel(kernel)
        return KernelSource(
            lang="triton", name=kernel.name, source=code.source, entry=code.name,
            meta=code.meta(),
        )

    def can_fuse(self, group: Kernel, fused: Kernel) -> bool:
        """No, when ``group`` is a reduction Triton would run split and ``fused`` no
        longer can be: a second pass (a variance after its mean) would run the whole
        reduction on as many programs as there are rows (64 channels: 2 programs of 32
        channels each; 41 ms for one ResNet-18 batch-norm in training on the H200); and
        past :attr:`max_kernel_buffers`. Stores inside the pass split
        (:func:`.split_writer.splittable`). A kernel summing across its rows must be
        :func:`.mixed_writer.mixable`."""
        if not super().can_fuse(group, fused):
            return False
        if has_across(fused):
            return mixable(fused)
        if (not fused.is_reduction or fused.template is not None or not wants_split(fused)
                or splittable(fused)):
            return True
        return not splittable(group)

    def supports_atomic_add(self, dtype: torch.dtype) -> bool:
        return dtype in ATOMIC_ADD_DTYPES

    def matmul_template(self, problem: MatmulProblem) -> MatmulTemplate | None:
        """A template, or the extern: :func:`.matmul_choice.choose_matmul` (a heuristic;
        timed candidates under ``mode="max-autotune"``; the TMA variant only for CUDA
        graphs)."""
        return choose_matmul(problem, self.device_type)

    def concurrent_parts(self, kernel: Kernel) -> list[frozenset[str]] | None:
        """A combo kernel's parts (:func:`.combo.combo_parts`: one part a program)."""
        parts = combo_parts(kernel)
        if parts is None:
            return None
        return [frozenset(s.buffer for s in part if isinstance(s, (Load, Store)))
                for part in parts]

    def aligned_buffers(self, kernel: Kernel) -> tuple[str, ...]:
        """The operands a TMA matmul template reads through descriptors
        (:func:`.matmul_tma_template.descriptor_buffers`)."""
        return descriptor_buffers(kernel)
