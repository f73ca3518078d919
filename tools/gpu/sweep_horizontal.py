"""How wide a horizontally fused Triton kernel should grow: a 100M-parameter AdamW step
(``bench_optimizer``'s model) compiled with Ember at several values of the Triton
backend's ``horizontal_buffer_limit`` (None: no limit), each in a fresh process with a
fresh cache, printing the kernels launched, their total GPU time and the wall time a
step, beside torch.compile's (``SWEEP_TORCH=0``: Ember's only).
``python3 tools/gpu/sweep_horizontal.py [limits]`` (default ``none,8,12,16,24,32,64``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _measure(name: str, limit: int | None) -> None:
    import ember.frontend as ef
    from bench_optimizer import _model
    from ember.inductor.codegen.triton.backend import TritonBackend
    from torch.profiler import ProfilerActivity, profile

    TritonBackend.horizontal_buffer_limit = limit
    model = _model(100, 2048, "cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    opt.step()
    step: Callable[[], Any] = torch.compile(opt.step) if name == "torch" else ef.compile(opt.step)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - start) / 20 * 1e3
    host = 0.0  # the time to issue a step with the GPU idle: the host's share
    for _ in range(20):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        host += time.perf_counter() - start
    host = host / 20 * 1e3
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.key_averages() if e.device_time_total > 0]
    gpu = sum(e.device_time_total for e in kernels) / 5 / 1e3
    launches = sum(e.count for e in kernels) // 5
    print(f"{name:6s} limit {str(limit):5s}: wall {wall:.3f} ms, host {host:.3f} ms, "
          f"GPU {gpu:.3f} ms, "
          f"{launches} launches a step", flush=True)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        _measure(sys.argv[2], None if sys.argv[3] == "none" else int(sys.argv[3]))
        return
    limits = (sys.argv[1] if len(sys.argv) > 1 else "none,8,12,16,24,32,64").split(",")
    runs = [("torch", "none")] if os.environ.get("SWEEP_TORCH", "1") != "0" else []
    runs += [("ember", limit) for limit in limits]
    for name, limit in runs:
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "EMBER_CACHE_DIR": cache}
            subprocess.run([sys.executable, __file__, "--one", name, limit], env=env,
                           timeout=240, check=False)


if __name__ == "__main__":
    main()
