"""The host time of a compiled optimizer step, where the kernels cost nothing: AdamW
(foreach) over 24 ``Linear(16, 16)`` (48 tensors) on the CPU, eager's step beside
Ember's in microseconds, and with ``prof`` a cProfile of 200 of Ember's steps (the
guards, the wrapper's checks, the aliasing check, the launcher).
``python tools/optimizer_host.py [prof]``."""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import torch
from torch import nn


def _us(step: Callable[[], Any], n: int = 200) -> float:
    for _ in range(5):
        step()
    start = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(16, 16) for _ in range(24)))
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    opt.step()
    step = ef.compile(opt.step)
    for _ in range(3):
        step()
    print(f"eager {_us(opt.step):.0f} us a step, ember {_us(step):.0f} us a step")
    if sys.argv[1:] == ["prof"]:
        profiler = cProfile.Profile()
        profiler.runcall(lambda: [step() for _ in range(200)])
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
