"""Top CUDA kernels of Ember and torch.compile on issue #16's matmul workloads (H200).

    python tools/gpu/profile_matmul.py mlp:8192x768,gemm_bias_gelu:8192x3072x768 [max-autotune]

Each workload (``benchlib.matmul`` names) is compiled by each compiler (default mode, or the
mode given), warmed up, and profiled over 20 calls; the kernel table shows where the time
goes per call.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ember.frontend as ef  # noqa: E402
from benchlib import matmul  # noqa: E402


def main() -> None:
    names = sys.argv[1].split(",")
    mode = sys.argv[2] if len(sys.argv) > 2 else None
    for work in matmul.workloads("full", names):
        module, inputs = work.make(torch.device("cuda"), torch.bfloat16)
        compiled = [("eager", module),
                    ("ember", ef.compile(module, backend="inductor", mode=mode)),
                    ("torch", torch.compile(module, mode=mode))]
        for label, fn in compiled:
            with torch.no_grad():
                for _ in range(3):
                    fn(*inputs)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(20):
                        fn(*inputs)
                    torch.cuda.synchronize()
            events = prof.key_averages()
            total = sum(e.self_device_time_total for e in events
                        if e.device_type == torch.autograd.DeviceType.CUDA) / 20
            print(f"===== {work.name} {label} {mode or 'default'}: {total:.1f} us of kernels per call",
                  flush=True)
            print(events.table(sort_by="self_cuda_time_total", row_limit=10,
                               max_name_column_width=90))


if __name__ == "__main__":
    main()
