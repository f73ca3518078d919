"""Timing one candidate: the median of repeated runs after a warm-up.

On a GPU each run is timed with a pair of CUDA events on the current stream, after the
L2 cache is overwritten (a candidate is timed reading from memory, as it will run in a
model, not from what its previous run left in the cache); the number of runs follows
from a first estimate of the candidate's time, between :data:`MIN_RUNS` and
:data:`MAX_RUNS`. On the CPU (kernels run by Triton's interpreter, in tests) runs are
timed with ``time.perf_counter``, :data:`CPU_RUNS` runs and no warm-up: the
interpreter's times say nothing about a GPU's, they only let tests exercise the choice.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch

WARMUP_MS = 10.0
MEASURE_MS = 50.0
MIN_RUNS = 5
MAX_RUNS = 200
ESTIMATE_RUNS = 3
L2_FLUSH_BYTES = 256 * 2**20  # more than any current GPU's L2 (H200: 50 MiB)
CPU_RUNS = 1


def median_ms(run: Callable[[], None], device: torch.device) -> float:
    """The median time of one ``run()`` on ``device``, in milliseconds.

    Raises:
        whatever ``run`` raises.
    """
    if device.type == "cuda":
        return _cuda_median_ms(run, device)
    times = []
    for _ in range(CPU_RUNS):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e3)
    return float(statistics.median(times))


def _cuda_median_ms(run: Callable[[], None], device: torch.device) -> float:
    with torch.cuda.device(device):
        flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        run()
        torch.cuda.synchronize()
        start, end = _event(), _event()
        start.record()
        for _ in range(ESTIMATE_RUNS):
            run()
        end.record()
        torch.cuda.synchronize()
        estimate = max(start.elapsed_time(end) / ESTIMATE_RUNS, 1e-3)
        for _ in range(min(MAX_RUNS, math.ceil(WARMUP_MS / estimate))):
            run()
        runs = max(MIN_RUNS, min(MAX_RUNS, math.ceil(MEASURE_MS / estimate)))
        starts = [_event() for _ in range(runs)]
        ends = [_event() for _ in range(runs)]
        for s, e in zip(starts, ends):
            flush.zero_()
            s.record()
            run()
            e.record()
        torch.cuda.synchronize()
        return float(statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)))


def _event() -> torch.cuda.Event:
    event: torch.cuda.Event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    return event
