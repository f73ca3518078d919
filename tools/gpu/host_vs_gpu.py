"""Is a compiled step host-bound, or does its host wait for the GPU? (H200 diagnosis)

    python tools/gpu/host_vs_gpu.py hf_bert,tv_resnet18 bfloat16 train [torch,ember]

Session 28 measured a training step's host time (its Python, the GPU drained before the
step) as long as its GPU time, for torch.compile and Ember alike. Either the step's Python
really is that slow, or the host blocks inside the step: a synchronising call (``.item()``,
a device-to-host copy, ``cudaMalloc`` after the caching allocator runs short) or a full
launch queue. For each compiler's step this prints, as medians of 20 steps:

- ``host``: the step's call, the GPU drained before it;
- ``gpu``: the step's GPU time, from CUDA events recorded around it;
- ``syncs``: synchronising calls torch reports in one step (``set_sync_debug_mode``);
- ``launch-only``: the host time of the step with the GPU held busy beforehand by a
  long kernel (a sleep on the stream), so that nothing the step launches can finish
  while its Python runs: a step that still returns early only launched;
- ``allocs``: ``cudaMalloc`` calls of one step (the allocator's ``num_alloc_retries`` and
  segment counts before and after).

A ``host`` close to ``gpu`` with ``launch-only`` far below it means the host waited for
the GPU (``syncs`` says whether torch knows why); a ``launch-only`` as long as ``host``
means the Python itself is the cost.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import zoo
from benchlib.runner import make_step

_STEPS = 20


def _median(values: list[float]) -> float:
    return statistics.median(values)


def host_and_gpu(step: Any) -> tuple[float, float]:
    """Median host ms (GPU drained first) and median GPU ms (events) of one step."""
    hosts, gpus = [], []
    for _ in range(_STEPS):
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start = time.perf_counter()
        begin.record()
        step()
        end.record()
        hosts.append((time.perf_counter() - start) * 1e3)
        end.synchronize()
        gpus.append(begin.elapsed_time(end))
    return _median(hosts), _median(gpus)


def launch_only(step: Any, busy_ms: float) -> float:
    """Median host ms of a step launched behind a ``busy_ms`` GPU sleep."""
    hosts = []
    cycles = int(busy_ms * 1e6 * 2)  # about 2 GHz: at least busy_ms of sleeping
    for _ in range(_STEPS):
        torch.cuda.synchronize()
        torch.cuda._sleep(cycles)  # noqa: SLF001 - a diagnosis tool, not package code
        start = time.perf_counter()
        step()
        hosts.append((time.perf_counter() - start) * 1e3)
    torch.cuda.synchronize()
    return _median(hosts)


def syncs_of(step: Any) -> list[str]:
    """The synchronising calls torch warns about during one step."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return [str(w.message).splitlines()[0] for w in caught
            if "synchroniz" in str(w.message).lower()]


def allocs_of(step: Any) -> int:
    """``cudaMalloc`` calls (new segments) during one step."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats().get("segment.all.allocated", 0)
    step()
    torch.cuda.synchronize()
    return int(torch.cuda.memory_stats().get("segment.all.allocated", 0) - before)


def main() -> None:
    names, dtype = sys.argv[1].split(","), getattr(torch, sys.argv[2])
    train = sys.argv[3] == "train"
    compilers = (sys.argv[4] if len(sys.argv) > 4 else "torch,ember").split(",")
    for name in names:
        base, inputs = zoo.get(name).make(torch.device("cuda"), dtype, "full")
        print(f"===== {name} {sys.argv[2]} {sys.argv[3]}", flush=True)
        for compiler in compilers:
            step = make_step(compiler, copy.deepcopy(base), inputs, train, "inductor")
            for _ in range(5):
                step()
            host, gpu = host_and_gpu(step)
            busy = launch_only(step, busy_ms=max(50.0, 3 * gpu))
            syncs = syncs_of(step)
            allocs = allocs_of(step)
            print(f"  {compiler:8} host {host:7.2f} ms  gpu {gpu:7.2f} ms  launch-only "
                  f"{busy:7.2f} ms  syncs {len(syncs)}  new segments {allocs}", flush=True)
            for text in sorted(set(syncs))[:10]:
                print(f"      sync: {text}", flush=True)
            del step
            torch.cuda.empty_cache()
        del base, inputs


if __name__ == "__main__":
    main()
