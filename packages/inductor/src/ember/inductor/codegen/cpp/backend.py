"""CppBackend: loop-IR kernels -> C++/OpenMP sources for CPU tensors."""

from __future__ import annotations

import dataclasses

from ember.inductor.codegen.backend import KernelBackend, KernelSource
from ember.inductor.codegen.cpp.kernel import generate_function
from ember.inductor.codegen.cpp.loop_shapes import column_tiled
from ember.inductor.codegen.cpp.prelude import PRELUDE
from ember.inductor.loop_ir import Kernel


class CppBackend(KernelBackend):
    """Generates one self-contained C++ file per kernel (prelude + ``extern "C"``
    function named after the kernel), compiled by the runtime with g++ -O3
    -march=native -fopenmp and called through ctypes. Found by
    ``registry.backend_for("cpu")``; its device policy is :class:`KernelBackend`'s
    defaults (scatters add sequentially; integer division by zero raises, as eager on
    the CPU), except that horizontal fusion stops at 8 buffers a kernel (over at least
    ``scheduler.HORIZONTAL_LIMIT_ELEMENTS`` elements) and any fusion at 1000 (ctypes
    calls a function of at most 1024 arguments: an Adam step over 240 small parameters
    fused into one kernel of 1082 could not be loaded)."""

    device_type = "cpu"
    horizontal_buffer_limit: int | None = 8
    max_kernel_buffers: int | None = 1000

    def generate(self, kernel: Kernel) -> KernelSource:
        source = PRELUDE + "\n" + generate_function(kernel) + "\n"
        arg_dtypes = [str(b.dtype).removeprefix("torch.") for b in kernel.buffers]
        meta: dict[str, object] = {"arg_dtypes": arg_dtypes}
        if kernel.size_args:  # int64 scalars after the buffers (a symbolic kernel)
            meta["size_args"] = list(kernel.size_args)
        return KernelSource(lang="cpp", name=kernel.name, source=source, entry=kernel.name,
                            meta=meta)

    def can_absorb(self, fused: Kernel) -> bool:
        """Not into a column reduction (``loop_shapes.column_tiled``: the loops walk 16
        columns at a time, so the producer's work loses its long vector loops). One CPU
        thread, training, quick suite, one process
        (``OMP_NUM_THREADS=1 python tools/ab_cpu.py MODELS 40``; docs/benchmarks.md,
        session 41): taking in everywhere, resnet (NCHW: its batch norms' sums run along
        contiguous rows) 70.2 against 76.6 ms, but hf_gpt2 4.45 against 4.28, mlp 10.30
        against 9.94, rms_norm 1.14 against 1.08 (bias and weight gradients: column
        reductions), within this machine's run-to-run noise of 5-10%."""
        return not column_tiled(fused)

    def bundle(self, sources: list[KernelSource]) -> list[KernelSource]:
        """One C++ file holding every kernel of the graph (one g++ run per graph)."""
        if len(sources) <= 1:
            return sources
        functions = [s.source[len(PRELUDE):] for s in sources]
        text = PRELUDE + "".join(functions)
        return [dataclasses.replace(s, source=text) for s in sources]

