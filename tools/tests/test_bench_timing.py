"""Timing helpers, including the CUDA code paths (with the device calls faked)."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from benchlib import timing


def test_cpu_median_warms_up_and_respects_rep_bounds() -> None:
    calls = []
    seconds = timing.median_seconds(lambda: calls.append(1), torch.device("cpu"),
                                    min_time_s=0.0, min_reps=7, max_reps=7, warmup=3)
    assert len(calls) == 10 and 0 <= seconds < 0.01


def test_cpu_median_of_a_sleeping_function() -> None:
    import time

    seconds = timing.median_seconds(lambda: time.sleep(0.002), torch.device("cpu"),
                                    min_time_s=0.0, min_reps=5, max_reps=5, warmup=0)
    assert 0.0018 < seconds < 0.05


def test_cuda_timing_uses_do_bench_median_in_milliseconds(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def fake_do_bench(fn, return_mode="mean"):  # type: ignore[no-untyped-def]
        seen["mode"] = return_mode
        fn()
        return 2.5  # ms

    fake = types.ModuleType("triton.testing")
    fake.do_bench = fake_do_bench  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton.testing", fake)
    import triton

    monkeypatch.setattr(triton, "testing", fake, raising=False)
    calls = []
    assert timing.median_seconds(lambda: calls.append(1), torch.device("cuda")) == 0.0025
    assert seen["mode"] == "median" and calls == [1]


def test_cuda_peak_memory_is_measured_above_the_baseline(monkeypatch: pytest.MonkeyPatch) -> None:
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: events.append("empty"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats",
                        lambda device=None: events.append("reset"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 100 * 2**20)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 164 * 2**20)
    peak = timing.peak_memory_mb(lambda: events.append("run"), torch.device("cuda"))
    assert peak == 64.0
    # alone, with the allocator's cache emptied first (issue #19)
    assert events == ["sync", "empty", "reset", "run", "sync"]


def test_cpu_peak_memory_is_not_measured() -> None:
    assert timing.peak_memory_mb(lambda: None, torch.device("cpu")) is None


def test_overhead_is_per_call_microseconds() -> None:
    calls = []
    us = timing.per_call_overhead_us(lambda: calls.append(1), torch.device("cpu"), calls=100)
    assert len(calls) == 10 + 100 and 0 < us < 1000


def test_interleaved_timing_round_robins_and_reports_failures() -> None:
    order: list[str] = []

    def boom() -> None:
        order.append("b")
        raise RuntimeError("broken kernel")

    results = timing.interleaved_median_seconds(
        {"a": lambda: order.append("a"), "b": boom, "c": lambda: order.append("c")},
        torch.device("cpu"), min_time_s=0.0, min_reps=3, max_reps=3, warmup=1,
    )
    assert isinstance(results["b"], RuntimeError)
    assert isinstance(results["a"], float) and isinstance(results["c"], float)
    # warm-up a, b (fails, dropped), c; then three rounds of a, c
    assert order == ["a", "b", "c", "a", "c", "a", "c", "a", "c"]


def test_interleaved_timing_on_cuda_uses_device_timing_per_function(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timed: list[str] = []

    def fake_median(fn, device, **kw):  # type: ignore[no-untyped-def]
        assert device.type == "cuda"
        fn()
        return 0.001 * len(timed)

    monkeypatch.setattr(timing, "median_seconds", fake_median)
    monkeypatch.setattr(timing, "CUDA_ROUNDS", 1)

    def boom() -> None:
        raise RuntimeError("illegal memory access")

    results = timing.interleaved_median_seconds(
        {"eager": lambda: timed.append("eager"), "bad": boom,
         "torch": lambda: timed.append("torch")},
        torch.device("cuda"),
    )
    assert timed == ["eager", "torch"]
    assert results["eager"] == 0.001 and results["torch"] == 0.002
    assert isinstance(results["bad"], RuntimeError)


def test_synchronize_waits_only_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    timing.synchronize(torch.device("cpu"))
    timing.synchronize(torch.device("cuda", 0))
    assert calls == [torch.device("cuda", 0)]


def test_cuda_compilers_are_timed_in_rotating_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each function is timed ``CUDA_ROUNDS`` times, each round starting one function
    later; its result is the median of its rounds; one that raises is not timed again."""
    order: list[str] = []
    times = {"eager": iter([3.0, 1.0, 2.0]), "torch": iter([5.0, 4.0, 6.0])}

    def fake_median(fn, device):  # type: ignore[no-untyped-def]
        return fn()

    def timed(key: str):  # type: ignore[no-untyped-def]
        def run() -> float:
            order.append(key)
            if key == "ember":
                raise RuntimeError("boom")
            return next(times[key])
        return run

    monkeypatch.setattr(timing, "median_seconds", fake_median)
    monkeypatch.setattr(timing, "CUDA_ROUNDS", 3)
    got = timing.interleaved_median_seconds(
        {k: timed(k) for k in ("eager", "torch", "ember")}, torch.device("cuda"))
    assert order == ["eager", "torch", "ember", "torch", "eager", "eager", "torch"]
    assert got["eager"] == 2.0 and got["torch"] == 5.0
    assert isinstance(got["ember"], RuntimeError)
