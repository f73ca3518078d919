"""How long Triton takes to build each kernel of a zoo model for the H200, measured on
a machine without a GPU (Triton's sm_90 target): which kernels make a cold compile slow.

    python tools/gpu/triton_compile_times.py hf_bert bfloat16 train [--top 15]
    python tools/gpu/triton_compile_times.py hf_gpt2 bfloat16 infer

The model is captured and run through aot on the CPU, lowered for CUDA
(``benchlib.static_memory``), and each distinct kernel compiled one at a time with
``ember.runtime.compiled.triton_aot.compile_for_target``. Matmuls are lowered as if the
TMA templates were available (the H200's choice). Times are this machine's CPU and
Triton version, not the H200's: compare kernels with each other, not with the GPU's
cold-compile column. Set ``TRITON_CACHE_DIR`` to an empty folder, or Triton's cache
answers instead of its compiler.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib.static_memory import inference_program, training_program
from ember.inductor.codegen.triton import matmul_choice
from ember.inductor.compile import compile_program
from ember.runtime.compiled.triton_aot import compile_for_target
from ember.runtime.compiled.triton_launcher import spec_from_entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("dtype")
    parser.add_argument("mode", choices=("train", "infer"))
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    matmul_choice.tma_reason = lambda *a, **k: None  # type: ignore[assignment]
    device = torch.device("cuda")
    make = training_program if args.mode == "train" else inference_program
    compiled = compile_program(make(args.model, device, dtype, "full"),
                               {"device": "cuda", "precompile": False})
    times: list[tuple[float, str, str, int]] = []
    start = time.perf_counter()
    for graph, entry in compiled.metadata["compiled"]["graphs"].items():
        seen: set[str] = set()
        for kernel in entry["kernels"]:
            spec = spec_from_entry(kernel, compiled.files)
            if spec.source in seen:
                continue
            seen.add(spec.source)
            t0 = time.perf_counter()
            compile_for_target(spec)
            times.append((time.perf_counter() - t0, graph, spec.name,
                          len(spec.source.splitlines())))
    print(f"{args.model} {args.dtype} {args.mode}: {len(times)} kernels, "
          f"{time.perf_counter() - start:.1f} s one at a time")
    for seconds, graph, name, lines in sorted(times, reverse=True)[:args.top]:
        print(f"  {seconds:6.2f} s  {graph} {name} ({lines} lines)")


if __name__ == "__main__":
    main()
