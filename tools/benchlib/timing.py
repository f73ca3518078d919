"""Timing: median run time, per-call overhead and peak memory.

CUDA uses ``triton.testing.do_bench(..., return_mode="median")`` (device events, L2
flushed between runs). CPU uses the median of wall times after a warm-up.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def synchronize(device: torch.device) -> None:
    """Wait for queued device work (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(
    fn: Callable[[], Any],
    device: torch.device,
    *,
    min_time_s: float = 0.3,
    min_reps: int = 5,
    max_reps: int = 100,
    warmup: int = 2,
) -> float:
    """Median time of one call of ``fn``, in seconds.

    On CPU: ``warmup`` calls, then at least ``min_reps`` and at most ``max_reps`` timed
    calls, stopping once ``min_time_s`` has been spent.
    """
    if device.type == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, return_mode="median")) / 1e3
    for _ in range(warmup):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_reps and (
        len(times) < min_reps or time.perf_counter() - start < min_time_s
    ):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def per_call_overhead_us(fn: Callable[[], Any], device: torch.device, calls: int = 200) -> float:
    """Host time per call of ``fn`` on tiny inputs, in microseconds: the cost of guards,
    dispatch and launch rather than of the computation (median of 5 batches of calls)."""
    for _ in range(10):
        fn()
    synchronize(device)
    batches = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls // 5):
            fn()
        synchronize(device)
        batches.append((time.perf_counter() - t0) / (calls // 5))
    return statistics.median(batches) * 1e6


def peak_memory_mb(fn: Callable[[], Any], device: torch.device) -> float | None:
    """Peak device memory allocated during one call of ``fn``, above what was allocated
    before it (weights, inputs, what other compilers hold), in MiB; ``None`` on CPU (not
    measured). Measured alone, after the timed calls (``do_bench``'s L2-flush buffer
    would count inside them), with the allocator's cache emptied first."""
    if device.type != "cuda":
        return None
    gc.collect()  # outputs of earlier calls held by reference cycles
    synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20


#: rounds of ``do_bench`` per function on CUDA. Timed one after another once each, the
#: zoo's mlp training step (5 cuBLAS GEMMs, the same in both) measured Ember, timed last,
#: at 0.94x of torch.compile although their kernels' profiled sums were equal (session
#: 44, H100): rotating rounds keep any drift from always favouring the first compiler
CUDA_ROUNDS = 3


def _cuda_rounds(fns: dict[str, Callable[[], Any]], device: torch.device
                 ) -> dict[str, float | BaseException]:
    """The median of :data:`CUDA_ROUNDS` ``do_bench`` medians of each function, round
    ``i`` starting at function ``i`` (so none is always timed first or last); a function
    that raises is not timed again (its exception is its result)."""
    keys = list(fns)
    times: dict[str, list[float]] = {key: [] for key in keys}
    failed: dict[str, BaseException] = {}
    for round_ in range(CUDA_ROUNDS):
        for j in range(len(keys)):
            key = keys[(round_ + j) % len(keys)]
            if key in failed:
                continue
            try:
                times[key].append(median_seconds(fns[key], device))
            except Exception as exc:  # noqa: BLE001 - returned to the caller's row
                failed[key] = exc
    return {key: failed[key] if key in failed else statistics.median(times[key])
            for key in keys}


def interleaved_median_seconds(
    fns: dict[str, Callable[[], Any]],
    device: torch.device,
    *,
    min_time_s: float = 1.0,
    min_reps: int = 5,
    max_reps: int = 100,
    warmup: int = 2,
    mean: bool = False,
) -> dict[str, float | BaseException]:
    """Median time of each of ``fns``, in seconds (or the exception it raised); with
    ``mean``, the mean on CPU instead (``bench.py --busy``: beside busy processes call
    times split into fast and slow calls, and the median hides the slow ones).

    On CPU the functions are timed round-robin, one call each per round, so that load from
    other processes (a shared machine) slows all of them alike and their ratios stay
    meaningful; rounds stop after ``min_reps`` once ``min_time_s`` has passed, or at
    ``max_reps``. On CUDA each is timed by :func:`median_seconds` (device events) in
    :data:`CUDA_ROUNDS` rounds, each round starting one function later, and gets the
    median of its rounds (:func:`_cuda_rounds`).
    """
    results: dict[str, float | BaseException] = {}
    if device.type == "cuda":
        return _cuda_rounds(fns, device)
    live = dict(fns)
    times: dict[str, list[float]] = {key: [] for key in fns}
    for key, fn in list(live.items()):
        try:
            for _ in range(warmup):
                fn()
        except Exception as exc:  # noqa: BLE001 - returned to the caller's row
            results[key] = exc
            del live[key]
    start = time.perf_counter()
    rounds = 0
    while live and rounds < max_reps and (
        rounds < min_reps or time.perf_counter() - start < min_time_s
    ):
        rounds += 1
        for key, fn in list(live.items()):
            try:
                t0 = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - t0)
            except Exception as exc:  # noqa: BLE001 - returned to the caller's row
                results[key] = exc
                del live[key]
    for key in live:
        results[key] = (statistics.mean if mean else statistics.median)(times[key])
    return results
