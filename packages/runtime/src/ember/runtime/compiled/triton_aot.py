"""Ahead-of-time compilation of Triton kernels for a GPU target, without a GPU.

``triton.compile`` takes a :class:`triton.backends.compiler.GPUTarget`; with one for
``sm_90`` it runs the whole NVIDIA pipeline (TTIR → TTGIR → LLIR → PTX → cubin, the last
step through the ``ptxas`` Triton ships) on a machine with no GPU. CI uses this to catch
kernels that the interpreter accepts but the compiler rejects, and a deployment can use it
to warm Triton's cache before the first launch.

:func:`warm_kernel` is the other way ahead of time, on the GPU itself: it builds a
kernel for the device it will run on before its first launch (the inductor stage warms
every Triton kernel of a program that way, several at once: :mod:`.parallel_build`) and
keeps the binary for that launch (:mod:`.triton_warmed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from ember.runtime.compiled import triton_cache, triton_processes, triton_stored, triton_warmed
from ember.runtime.compiled.triton_kernel import (
    POINTER_DTYPES,
    TritonKernelSpec,
    jit_function_from_source,
    warmable,
)
from ember.runtime.logs import log
from ember.runtime.phases import count

# Hopper (H100/H200): compute capability 9.0; the third field is the target's warp size
# (32 threads on every NVIDIA GPU).
SM90 = ("cuda", 90, 32)


@dataclass(frozen=True)
class AotResult:
    """What one ahead-of-time compile produced: ``asm`` maps a stage name (``ttir``,
    ``ttgir``, ``llir``, ``ptx``, ``cubin``) to its text or bytes; ``global_scratch_bytes``:
    the global scratch memory each launch asks Triton's allocator for (device-side TMA
    descriptors; 0 for most kernels: :mod:`.triton_scratch`)."""

    name: str
    asm: dict[str, Any]
    num_warps: int
    shared_bytes: int
    global_scratch_bytes: int = 0


class TritonAotError(RuntimeError):
    """Triton refused to compile a kernel for the target."""


def compile_for_target(
    spec: TritonKernelSpec, target: tuple[str, int, int] = SM90
) -> AotResult:
    """Compile ``spec`` for ``target`` (backend, capability, warp size) with no GPU.

    Raises:
        TritonAotError: with Triton's message and the kernel's name.
        TritonUnavailableError: when Triton is not installed.
    """
    compiled = build_for_target(spec, target)
    return AotResult(
        name=spec.name,
        asm=dict(compiled.asm),
        num_warps=int(compiled.metadata.num_warps),
        shared_bytes=int(compiled.metadata.shared),
        global_scratch_bytes=int(getattr(compiled.metadata, "global_scratch_size", 0) or 0),
    )


def build_for_target(spec: TritonKernelSpec, target: tuple[str, int, int] = SM90) -> Any:
    """Triton's compiled kernel of ``spec`` for ``target``, built with no GPU (see
    :func:`compile_for_target`; this returns Triton's own object, whose files are in
    Triton's cache).

    Raises:
        TritonAotError: with Triton's message and the kernel's name.
        TritonUnavailableError: when Triton is not installed.
    """
    import triton
    from triton.backends.compiler import GPUTarget

    backend, arch, warp_size = target
    fn = jit_function_from_source(spec, interpret=False, device=f"aot-{backend}{arch}")
    try:
        source = triton_stored.ast_source(spec, fn)
    except ValueError as e:
        raise TritonAotError(str(e)) from e
    options = {"num_warps": spec.num_warps, "num_stages": spec.num_stages}
    try:
        return triton.compile(source, target=GPUTarget(backend, arch, warp_size),
                              options=options)
    except Exception as e:  # Triton raises CompilationError, RuntimeError, ...
        raise TritonAotError(
            f"Triton kernel {spec.name} does not compile for {backend} {arch}: "
            f"{type(e).__name__}: {e}"
        ) from e


def start_triton_driver(device: torch.device) -> None:
    """Start Triton's GPU driver for ``device`` in this thread. It starts lazily, on
    first use (building a small C module into Triton's cache the first time): threads
    that :func:`warm_kernel` at once must find it started rather than race to start it.

    Raises:
        ImportError: when Triton is not installed.
    """
    from triton.runtime import driver

    with torch.cuda.device(device):
        driver.active.get_current_device()


def warm_kernel(spec: TritonKernelSpec, device: torch.device) -> None:
    """Build ``spec`` for the CUDA ``device`` now, as its first launch with 16-byte
    aligned tensors would (Triton's specialization for fresh allocations), and keep the
    binary in :mod:`.triton_warmed`, where that launch takes it instead of compiling.
    Thread-safe.

    Why not only Triton's JIT cache: it belongs to one ``JITFunction`` object, and the
    launcher may import the kernel file into another one (another Ember cache root at
    load time, a program loaded again), whose cache is empty (:mod:`.triton_warmed`).
    A binary that an earlier process built is loaded from :mod:`.triton_stored` instead
    of compiled (nor is Triton's compiler entered), and a new one is stored there.

    Raises:
        TritonAotError: ``spec`` is not :func:`warmable`, or Triton failed to compile
            it (the message names the kernel).
        TritonUnavailableError: when Triton is not installed.
    """
    if not warmable(spec):
        raise TritonAotError(f"Triton kernel {spec.name}: only kernels whose arguments are "
                             f"all tensors can be built before launch ({spec.signature})")
    index = triton_warmed.device_index(device)
    fn = jit_function_from_source(spec, interpret=False,
                                  device=triton_cache.device_tag(device, False))
    # NOTE: real (hence 16-byte aligned) one-element tensors: the specialization kept
    # with the binary is computed from them exactly as a launch computes its own
    args = [torch.empty(1, dtype=POINTER_DTYPES[t[1:]], device=torch.device("cuda", index))
            for t in spec.signature.values()]
    cuda = torch.device("cuda", index)
    specialization = triton_warmed.tensor_specialization(args)
    stored = triton_stored.load(spec, fn, cuda, specialization)
    if stored is not None:  # an earlier process built it: no Triton compile at all
        with torch.cuda.device(index):
            _load_for_launch(stored, spec)
        triton_warmed.record(triton_warmed.warm_key(spec, index), specialization, stored)
        return
    options: dict[str, Any] = dict(spec.constexprs)
    options.update(num_warps=spec.num_warps, num_stages=spec.num_stages)
    try:
        with torch.cuda.device(index):
            # a worker process compiles it into Triton's on-disk cache when it can (its
            # Python is not under this process's interpreter lock); the warm-up then loads it
            built_elsewhere = triton_processes.compile_elsewhere(spec, fn, args, options)
            compiled = fn.warmup(*args, grid=(1, 1, 1), **options)
            if hasattr(compiled, "result"):  # Triton's asynchronous compile mode
                compiled = compiled.result()
    except Exception as e:  # Triton raises CompilationError, RuntimeError, ...
        raise TritonAotError(f"Triton kernel {spec.name} does not compile for {device}: "
                             f"{type(e).__name__}: {e}") from e
    if built_elsewhere is not None:
        _count_process_build(spec, built_elsewhere, compiled)
    if compiled is not None:  # None: a jit_cache_hook asked Triton not to compile
        with torch.cuda.device(index):
            _load_for_launch(compiled, spec)
        triton_warmed.record(triton_warmed.warm_key(spec, index), specialization, compiled)
        triton_stored.store(spec, cuda, specialization, compiled)
    count("triton builds")


def _count_process_build(spec: TritonKernelSpec, key: str, compiled: Any) -> None:
    """Count whether the warm-up loaded the binary a worker process built (its cache key
    is the worker's) or compiled its own (a specialization that did not round-trip)."""
    if compiled is not None and str(getattr(compiled, "hash", "")) == key:
        count("triton process builds")
        return
    count("triton process builds unused")
    log("stages", f"Triton kernel {spec.name}: the binary a worker process built was not "
                  "the one the launch needed (compiled again in the build thread)")


def _load_for_launch(compiled: Any, spec: TritonKernelSpec) -> None:
    """Load ``compiled``'s binary onto the current device and make its launcher now, in
    the build thread, rather than at its first launch.

    Why: reading Triton 3.6's driver, the first ``run`` of a compiled kernel builds a C
    launcher for its argument types (one ``cc`` run per distinct signature, cached on
    disk) and loads the binary: serial work on the first call, which a cold compile's
    first step pays for every kernel. Newer Tritons launch through a generic launcher;
    then this only loads the binary. A failure here is not the kernel's: the first
    launch makes the launcher again and reports its own error (logged under
    ``stages``, counted as ``launchers left to first launch``).
    """
    try:
        compiled.run  # noqa: B018 - the property loads the binary and makes the launcher
    except Exception as e:  # noqa: BLE001 - the first launch repeats it and raises
        log("stages", f"Triton kernel {spec.name}: launcher left to its first launch "
                      f"({type(e).__name__}: {e})")
        count("launchers left to first launch")
