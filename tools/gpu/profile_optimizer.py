"""Where a compiled 100M-parameter AdamW step spends its time on the GPU machine: the
GPU kernels (torch.profiler, CUDA time per kernel), the host (cProfile of the steady
step, top functions by own time) and the wall time per step, for Ember beside
torch.compile. ``python3 tools/gpu/profile_optimizer.py [millions] [width]``."""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ember.frontend as ef
from bench_optimizer import _model
from torch.profiler import ProfilerActivity, profile


def _wall_ms(step: Callable[[], Any], n: int = 20) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n * 1e3


def _host_ms(step: Callable[[], Any], n: int = 20) -> float:
    """The time to issue one step with the GPU idle at the start (the host's share)."""
    total = 0.0
    for _ in range(n):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        total += time.perf_counter() - start
    torch.cuda.synchronize()
    return total / n * 1e3


def main() -> None:
    millions = float(sys.argv[1]) if len(sys.argv) > 1 else 100.0
    width = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    for name in ("torch", "ember"):
        model = _model(millions, width, "cuda")
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        opt.step()
        step = torch.compile(opt.step) if name == "torch" else ef.compile(opt.step)
        for _ in range(3):
            step()
        print(f"===== {name}: wall {_wall_ms(step):.3f} ms a step, host {_host_ms(step):.3f} ms")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=70))
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(20):
            step()
        profiler.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(18)
        print(text.getvalue()[-4000:])
        del step, opt, model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
