"""Where one decode step's time goes: HF GPT-2 ``generate`` with its ``forward`` compiled by
Ember and by torch.compile, beside eager (issue #15's second-``generate`` gap).

    python tools/gpu/profile_generate.py [new_tokens]   # on the H200, after h200_all.sh's setup
    python tools/gpu/profile_generate.py 32 cpu         # the tiny config on this machine's CPU

For each compiler: compile (a first ``generate`` of the same length: prefill, first decode,
dynamic decode, and torch's cuDNN attention plans, built once per new length), then a timed ``generate`` of ``new_tokens`` (default 64) with the per-call CPU time
spent inside the compiled ``forward`` accumulated, then the same ``generate`` under the torch
profiler (CPU and CUDA). Prints per token: wall time, CPU time inside ``forward``, GPU kernel
time, kernel launches; then the top CUDA kernels and the top CPU ops of each compiler.
"""

from __future__ import annotations

import cProfile
import copy
import dataclasses
import inspect
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib import compilers, generate  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class _Timed:
    """``forward`` with the CPU time of each call added up (no synchronisation)."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.seconds, self.calls = fn, 0.0, 0
        self.last: tuple[tuple[Any, ...], dict[str, Any]] = ((), {})
        # generate() reads forward's signature to choose its arguments: keep it visible
        self.__signature__ = inspect.signature(fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.last = (args, kwargs)
        start = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1


def _guard_costs(compiled: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The time of each cache entry's check function on the last decode call."""
    strict_fn = getattr(compiled, "_compiled", compiled)
    state = strict_fn._entry_state(strict_fn._bound + args, kwargs)
    with torch.no_grad():
        for i, entry in enumerate(strict_fn.segments.get(0, [])):
            hit = entry.match(state, strict_fn._ctx) is not None
            start = time.perf_counter()
            for _ in range(200):
                entry.match(state, strict_fn._ctx)
            each = (time.perf_counter() - start) / 200
            print(f"===== ember entry {i}: {len(entry.guards.guards)} guards, "
                  f"{'hit' if hit else 'miss'}, check {each * 1e6:.1f} us", flush=True)


def main() -> None:
    new_tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    cpu = len(sys.argv) > 2 and sys.argv[2] == "cpu"  # the tiny config on the CPU
    device = torch.device("cpu" if cpu else "cuda")
    dtype = torch.float32 if cpu else torch.bfloat16
    base = generate.TINY if cpu else generate.GenerateConfig()
    config = dataclasses.replace(base, new_tokens=new_tokens)
    model = generate.build_model(config, device, dtype)
    ids = generate.prompt_ids(config, device)
    for name in sys.argv[3].split(",") if len(sys.argv) > 3 else ("eager", "torch", "ember"):
        local = copy.deepcopy(model)
        compilers.reset(name)
        fn = (local.forward if name == "eager"
              else compilers.compile_fn(name, local.forward, "inductor"))
        timed = _Timed(fn)
        local.forward = timed
        start = time.perf_counter()
        generate.generate(local, ids, config)  # compiles; cuDNN plans per length
        sync(device)
        compile_s = time.perf_counter() - start
        timed.seconds, timed.calls = 0.0, 0
        start = time.perf_counter()
        generate.generate(local, ids, config)
        sync(device)
        wall = time.perf_counter() - start
        inside, calls = timed.seconds, timed.calls
        activities = [ProfilerActivity.CPU] + ([] if cpu else [ProfilerActivity.CUDA])
        with profile(activities=activities) as prof:
            generate.generate(local, ids, config)
            sync(device)
        events = prof.key_averages()
        kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        gpu_us = sum(e.self_device_time_total for e in kernels)
        launches = sum(e.count for e in kernels)
        print(f"===== {name}: warm-up generate (compiles) {compile_s:.1f} s; generate of "
              f"{new_tokens} tokens {wall * 1e3:.1f} ms = {wall / new_tokens * 1e3:.2f} ms/token; "
              f"inside forward (CPU) {inside / calls * 1e3:.2f} ms/call over {calls} calls; "
              f"GPU kernels {gpu_us / 1e3 / new_tokens:.2f} ms/token (profiled); "
              f"{launches / new_tokens:.0f} kernel launches/token", flush=True)
        if name == "ember":
            _guard_costs(fn, *timed.last)
        print(events.table(sort_by="self_cuda_time_total", row_limit=15, max_name_column_width=80))
        print(events.table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=80))
        _python_profile(name, lambda: generate.generate(local, ids, config), new_tokens)


def _python_profile(name: str, run: Any, tokens: int) -> None:
    """cProfile of one more ``generate``: where the Python time per token goes (the torch
    profiler shows only ATen ops and launches)."""
    prof = cProfile.Profile()
    prof.enable()
    run()
    prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text).sort_stats("tottime")
    stats.print_stats(35)
    print(text.getvalue())
    top = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:8]  # type: ignore[attr-defined]
    parts = [f"{fn[2]}@{Path(fn[0]).name}:{fn[1]} {v[2] / tokens * 1e3:.2f}ms" for fn, v in top]
    print(f"===== {name} python tottime per token: " + "; ".join(parts), flush=True)


if __name__ == "__main__":
    main()
