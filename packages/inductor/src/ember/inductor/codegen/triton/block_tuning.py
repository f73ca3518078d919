"""Autotuning the block sizes of a pointwise or reduction Triton kernel.

Under ``mode="max-autotune"`` (:func:`ember.inductor.autotune.autotune_enabled`),
:func:`tuned_launch_config` asks :func:`ember.inductor.autotune.select` to choose among
:func:`~.heuristics.candidate_configs` (kind ``"pointwise"`` or ``"reduction"``, keyed by
a digest of the kernel's source at the heuristic's configuration and its size hints).
Each candidate is generated, loaded through the runtime's Triton launcher (as the
compiled program will run it) and run on inputs built from the kernel's buffers:
sizes and strides at the graph's hints, floats drawn from a normal distribution by a
generator of its own (torch's global random state is untouched), integers zero (a valid
index into any tensor), booleans random. Every candidate gets its own tensors, so a
kernel that writes into a buffer it reads (an in-place update, an accumulating scatter)
changes nothing another candidate reads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import warnings
from collections.abc import Callable
from functools import partial

import sympy
import torch
from ember.inductor.autotune import Candidate, select, tuning_target
from ember.inductor.codegen.triton.heuristics import (
    LaunchConfig,
    candidate_configs,
    config_name,
)
from ember.inductor.codegen.triton.kernel_code import TritonKernelCode
from ember.inductor.codegen.triton.sizes import SizeFacts
from ember.inductor.loop_ir import Buffer, Kernel
from ember.runtime.compiled.triton_launcher import load_kernel
from ember.runtime.ir.contracts import KernelEntry, launch_meta_from_json

#: the seed of the inputs every candidate runs on
INPUT_SEED = 0

WriteKernel = Callable[[Kernel, LaunchConfig, SizeFacts], TritonKernelCode]


def tuned_launch_config(kernel: Kernel, default: LaunchConfig, facts: SizeFacts,
                        write: WriteKernel) -> LaunchConfig:
    """The configuration :func:`ember.inductor.autotune.select` picks for ``kernel``
    among the candidates around ``default`` (``default`` itself when autotuning is off
    or there is nothing to choose). ``write`` generates the kernel's code under a
    configuration."""
    if kernel.template is not None:
        return default  # a matmul template: chosen among its own candidates
    numel = facts.hint(kernel.numel)
    rnumel = facts.hint(kernel.reduction_numel) if kernel.is_reduction else 0
    configs = candidate_configs(default, numel, rnumel)
    if len(configs) == 1:
        return default
    by_name = {config_name(c): c for c in configs}
    canonical = dataclasses.replace(kernel, name="kernel")
    source = write(canonical, default, facts).source
    key = {
        "kernel": hashlib.sha256(source.encode("utf-8")).hexdigest()[:32],
        "numel": numel,
        "rnumel": rnumel,
        "sizes": {s: facts.hint(sympy.Symbol(s)) for s in kernel.size_args},
    }
    candidates = [Candidate(name, partial(_runner, kernel, config, facts, write))
                  for name, config in by_name.items()]
    kind = "reduction" if kernel.is_reduction else "pointwise"
    return by_name[select(kind, key, candidates, default=config_name(default))]


def _runner(kernel: Kernel, config: LaunchConfig, facts: SizeFacts,
            write: WriteKernel) -> Callable[[], None]:
    """Generate, load and run ``kernel`` under ``config`` once (Triton compiles it on a
    GPU); the callable runs it again on the same tensors."""
    launch = load_code(kernel, write(kernel, config, facts))
    device = tuning_target()
    args = kernel_arguments(kernel, facts, device)
    if device.type == "cuda":
        launch(*args)
        return partial(launch, *args)

    def interpreted() -> None:
        # NOTE: numpy, under Triton's interpreter, warns of the NaNs that random data
        # gives (the square root of a random variance); they are no concern of the user's
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            launch(*args)

    interpreted()
    return interpreted


def load_code(kernel: Kernel, code: TritonKernelCode) -> Callable[..., None]:
    """``code`` (generated for ``kernel``) loaded through the runtime's Triton launcher,
    as a compiled program loads it: ``launch(*buffers, *size_args)``."""
    path = "kernel.py"
    meta = launch_meta_from_json("triton", code.meta(), f"kernel {kernel.name!r}")
    return load_kernel(KernelEntry(kernel.name, "triton", code.name, path, meta),
                       {path: code.source.encode("utf-8")})


def kernel_arguments(kernel: Kernel, facts: SizeFacts, device: torch.device,
                     seed: int = INPUT_SEED) -> list[object]:
    """New tensors for ``kernel``'s buffers (:func:`random_buffer`, drawn from ``seed``)
    and the hints of its size arguments: what a candidate runs on."""
    generator = torch.Generator(device=device).manual_seed(seed)
    args: list[object] = [1.0 if b.host else random_buffer(b, facts, device, generator)
                          for b in kernel.buffers]  # a host scalar: passed by value
    return args + [facts.hint(sympy.Symbol(s)) for s in kernel.size_args]


def random_buffer(buffer: Buffer, facts: SizeFacts, device: torch.device,
                  generator: torch.Generator) -> torch.Tensor:
    """A tensor shaped like ``buffer`` at the hints (its strides, over storage of its
    extent), filled as the module doc says."""
    sizes = [facts.hint(s) for s in buffer.sizes]
    strides = [facts.hint(s) for s in buffer.strides]
    extent = 0 if 0 in sizes else 1 + sum((n - 1) * st for n, st in zip(sizes, strides))
    flat = torch.empty(extent, dtype=buffer.dtype, device=device)
    if buffer.dtype.is_floating_point:
        flat.normal_(generator=generator)
    elif buffer.dtype == torch.bool:
        flat.copy_(torch.empty(extent, device=device).uniform_(generator=generator) < 0.5)
    else:
        flat.zero_()
    return flat.as_strided(sizes, strides)
