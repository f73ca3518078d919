"""Where a zoo model's step time goes besides kernels (H200 diagnosis): per compiler,
the step's wall time beside the kernels' summed time, and the host-side CUDA calls
that can stall the GPU (allocations, frees, copies, synchronizations).

    python tools/gpu/profile_gaps.py hf_gpt2,hf_llama bfloat16 train
    python tools/gpu/profile_gaps.py hf_gpt2 bfloat16           # inference

The step is the bench's (``benchlib.runner.Step``: forward, backward of the scalar
loss, SGD step). ``idle`` is wall time minus kernel time: launch gaps the host left.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import zoo
from benchlib.runner import make_step
from torch.profiler import ProfilerActivity, profile

HOST_CALLS = ("cudaMalloc", "cudaFree", "cudaMemcpy", "cudaStreamSynchronize",
              "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemsetAsync",
              "cudaHostAlloc", "cudaStreamWaitEvent")


def wall_ms(step: object, steps: int = 20) -> float:
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()  # type: ignore[operator]
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    names, dtype = sys.argv[1].split(","), getattr(torch, sys.argv[2])
    train = "train" in sys.argv[3:]
    rows = int(os.environ.get("PROFILE_ROWS", "25"))
    for name in names:
        for compiler in ("ember", "torch"):
            module, inputs = zoo.get(name).make(torch.device("cuda"), dtype, "full")
            step = make_step(compiler, module, inputs, train, "inductor")
            for _ in range(3):
                step()
            wall = wall_ms(step)
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    step()
                torch.cuda.synchronize()
            events = prof.key_averages()
            kernels = sum(e.self_device_time_total for e in events) / 5 / 1e3
            print(f"===== {name} {sys.argv[2]} {'train' if train else 'infer'} {compiler}: "
                  f"wall {wall:.2f} ms/step, kernels {kernels:.2f} ms/step, "
                  f"idle {wall - kernels:.2f} ms/step", flush=True)
            host = [e for e in events if any(e.key.startswith(c) for c in HOST_CALLS)]
            for e in sorted(host, key=lambda e: -e.self_cpu_time_total):
                print(f"  {e.key:<40} {e.count / 5:8.1f} calls/step "
                      f"{e.self_cpu_time_total / 5 / 1e3:8.3f} ms/step (host)")
            print(events.table(sort_by="self_cpu_time_total", row_limit=rows,
                               max_name_column_width=70))
            del step, module, inputs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
