"""The CPU backend's horizontal fusion limit (``KernelBackend.horizontal_buffer_limit``):
independent updates of many same-shape tensors (an optimizer step's parameters) are
not all streamed by one kernel; dependent work and single-element buffers still fuse."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.scheduler import format_schedule, schedule
from helpers import trace


def six_updates(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor,
                e: torch.Tensor, f: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # one shared single-element scale (an optimizer's step size): not a shared stream
    return a * s + 1, b * s + 1, c * s + 1, d * s + 1, e * s + 1, f * s + 1


def _kernels(limit: int | None, size: int = 256) -> int:
    class Limited(CppBackend):
        horizontal_buffer_limit = limit

    inputs = [torch.randn(size, size) for _ in range(6)] + [torch.randn(())]
    steps = schedule(GraphLowering(trace(six_updates, inputs)).run(), Limited())
    text = format_schedule(steps)
    return sum(1 for line in text.splitlines() if line.startswith("kernel"))


def test_cpu_limit_splits_independent_updates() -> None:
    assert CppBackend.horizontal_buffer_limit == 8
    # 2 big buffers an update (in, out): 4 updates a kernel under 8 buffers
    assert _kernels(8) == 2
    assert _kernels(None) == 1
    assert _kernels(2) == 6


def test_small_arrays_fuse_whatever_the_limit() -> None:
    # 64 x 64: below HORIZONTAL_LIMIT_ELEMENTS, in cache; one launch beats six
    assert _kernels(2, size=64) == 1
