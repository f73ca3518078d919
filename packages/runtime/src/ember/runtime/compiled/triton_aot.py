"""Ahead-of-time compilation of Triton kernels for a GPU target, without a GPU.

``triton.compile`` takes a :class:`triton.backends.compiler.GPUTarget`; with one for
``sm_90`` it runs the whole NVIDIA pipeline (TTIR → TTGIR → LLIR → PTX → cubin, the last
step through the ``ptxas`` Triton ships) on a machine with no GPU. CI uses this to catch
kernels that the interpreter accepts but the compiler rejects, and a deployment can use it
to warm Triton's cache before the first launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ember.runtime.compiled.triton_kernel import TritonKernelSpec, jit_function_from_source

# Hopper (H100/H200): compute capability 9.0; the third field is the target's warp size
# (32 threads on every NVIDIA GPU).
SM90 = ("cuda", 90, 32)


@dataclass(frozen=True)
class AotResult:
    """What one ahead-of-time compile produced: ``asm`` maps a stage name (``ttir``,
    ``ttgir``, ``llir``, ``ptx``, ``cubin``) to its text or bytes."""

    name: str
    asm: dict[str, Any]
    num_warps: int
    shared_bytes: int


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
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    backend, arch, warp_size = target
    fn = jit_function_from_source(spec, interpret=False, device=f"aot-{backend}{arch}")
    signature: dict[str, str] = dict(spec.signature)
    for name in spec.constexprs:
        signature[name] = "constexpr"
    # Triton wants the signature in the function's parameter order.
    ordered = {name: signature[name] for name in fn.arg_names if name in signature}
    missing = set(fn.arg_names) - set(ordered)
    if missing:
        raise TritonAotError(
            f"Triton kernel {spec.name}: parameters {sorted(missing)} are neither in the "
            "signature nor constexprs"
        )
    source = ASTSource(fn, signature=ordered, constexprs=dict(spec.constexprs))
    options = {"num_warps": spec.num_warps, "num_stages": spec.num_stages}
    try:
        compiled = triton.compile(
            source, target=GPUTarget(backend, arch, warp_size), options=options
        )
    except Exception as e:  # Triton raises CompilationError, RuntimeError, ...
        raise TritonAotError(
            f"Triton kernel {spec.name} does not compile for {backend} {arch}: "
            f"{type(e).__name__}: {e}"
        ) from e
    return AotResult(
        name=spec.name,
        asm=dict(compiled.asm),
        num_warps=int(compiled.metadata.num_warps),
        shared_bytes=int(compiled.metadata.shared),
    )
