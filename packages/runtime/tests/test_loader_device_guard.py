"""A compiled graph traced on ``cuda:N`` runs with device N current
(``loader.on_device``): Triton launches its kernels and the wrapper allocates on the
current device. No GPU needed: the current device and ``torch.cuda.device`` are
stand-ins (the CUDA tests run the real ones on device 0)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

import torch
from ember.runtime.compiled import loader
from ember.runtime.compiled.loader import on_device


def _run(inputs: list[Any]) -> list[Any]:
    return [x + 1 for x in inputs]


def test_other_devices_run_as_they_are() -> None:
    assert on_device(torch.device("cpu"), _run) is _run
    assert on_device(torch.device("meta"), _run) is _run
    with mock.patch.object(loader, "raw_current_device", lambda: None):  # a CPU-only torch
        assert on_device(torch.device("cuda", 1), _run) is _run


def test_a_cuda_graph_switches_to_its_device_only_when_another_is_current() -> None:
    current, entered = [0], []

    @contextlib.contextmanager
    def device(index: int) -> Iterator[None]:
        entered.append(index)
        before, current[0] = current[0], index
        try:
            yield
        finally:
            current[0] = before

    seen: list[int] = []

    def run(inputs: list[Any]) -> list[Any]:
        seen.append(current[0])
        return _run(inputs)

    with mock.patch.object(loader, "raw_current_device", lambda: lambda: current[0]):
        guarded = on_device(torch.device("cuda", 1), run)
    with mock.patch.object(torch.cuda, "device", device):
        assert guarded([1]) == [2]  # device 0 current: run on device 1, then back
        current[0] = 1
        assert guarded([2]) == [3]  # already current: no switch
    assert seen == [1, 1] and entered == [1] and current[0] == 1
