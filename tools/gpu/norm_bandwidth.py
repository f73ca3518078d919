"""Normalisation training steps against copy bandwidth (issue 19 items 2-3, H200).

    python tools/gpu/norm_bandwidth.py [rms_norm,softmax_layernorm,batch_norm_1d,batch_norm_2d]
        [--row-warps 4,8,16]
    SCRIPT_ARGS="tools/gpu/norm_bandwidth.py" bash tools/gpu/h200_all.sh script

For each case (bf16; forward + backward of ``model(x).float().sum()``, the bench's
training objective) it prints:

- the copy bandwidth: ``torch.clone`` of ``x`` (bytes read + written over its time);
- eager's, torch.compile's and Ember's step times side by side, and each step's GB/s over
  the bytes the step must move: ``x`` read by the forward, ``x`` read and ``dx`` written
  by the backward (3 passes over ``x``; parameters and statistics are small), with its
  percentage of the copy bandwidth;
- Ember's kernels (``torch.profiler``): each kernel's mean time a step, and the GB/s of
  one pass over ``x`` in that time (a kernel streaming ``x`` once at copy speed is at
  100%; one reading ``x`` and writing ``dx`` at 200%).

``--row-warps 4,8,16`` adds Ember's step time with each warp count for persistent rows of
2048-4096 elements (``heuristics.WIDE_ROW_WARPS``, one row a program), compiled afresh
(Ember's caches off) for each.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable

from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import zoo  # noqa: E402

CASES = ("rms_norm", "softmax_layernorm", "batch_norm_1d", "batch_norm_2d")


class BatchNormReLU(nn.Module):
    def __init__(self, channels: int, dims: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(channels) if dims == 2 else nn.BatchNorm1d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(x))


def make(name: str) -> tuple[nn.Module, tuple[int, ...]]:
    """The case's module (on the CPU, float32) and input shape: the zoo's ``rms_norm``
    and ``softmax_layernorm`` (16384 of their full suite's rows), a BatchNorm+ReLU."""
    if name in ("rms_norm", "softmax_layernorm"):
        module, inputs = zoo.get(name).make(torch.device("cpu"), torch.float32, "full")
        return module, (16384, inputs[0].shape[1])
    if name == "batch_norm_1d":
        return BatchNormReLU(4096, 1), (16384, 4096)
    if name == "batch_norm_2d":
        return BatchNormReLU(64, 2), (32, 64, 56, 56)
    raise SystemExit(f"norm_bandwidth.py: unknown case {name!r} (expected {', '.join(CASES)})")


def time_ms(fn: Callable[[], object], repeat: int = 20) -> float:
    """Median milliseconds of ``fn`` over ``repeat`` runs (CUDA events), after 3 warm-ups."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(float(start.elapsed_time(end)))
    return statistics.median(times)


def step_fn(model: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
            ) -> Callable[[], None]:
    def step() -> None:
        x.grad = None
        model(x).float().sum().backward()  # type: ignore[no-untyped-call]
    return step


def kernel_times(step: Callable[[], None], steps: int = 5) -> list[tuple[str, float]]:
    """(kernel name, mean ms a step) of the CUDA kernels ``step`` launches."""
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    rows = []
    for event in prof.key_averages():
        total = getattr(event, "self_device_time_total", None)
        if total is None:  # older torch
            total = getattr(event, "self_cuda_time_total", 0.0)
        us = float(total or 0.0)
        if us > 0:
            rows.append((str(event.key), us / 1000 / steps))
    return sorted(rows, key=lambda r: -r[1])


def row_warps_sweep(module: nn.Module, x: torch.Tensor, warps: list[int]) -> None:
    """Ember's step time with each of ``warps`` for persistent rows of 2048-4096."""
    import ember.frontend
    from ember.inductor.codegen.triton import heuristics
    from ember.runtime.config import patch

    saved = dict(heuristics.WIDE_ROW_WARPS)
    try:
        for w in warps:
            heuristics.WIDE_ROW_WARPS.update({2: w, 4: w})  # rows of 2-4 x WIDE_ROW
            with patch(cache_enabled=False, program_cache=False, capture_cache=False):
                compiled = ember.frontend.compile(module, backend="inductor")
                ms = time_ms(step_fn(compiled, x))
            print(f"  ember, rows of 2048-4096 with {w:2d} warps: {ms:8.3f} ms", flush=True)
    finally:
        heuristics.WIDE_ROW_WARPS.clear()
        heuristics.WIDE_ROW_WARPS.update(saved)


def run(name: str, warps: list[int]) -> None:
    import ember.frontend

    torch.manual_seed(0)
    module, shape = make(name)
    module = module.to("cuda", torch.bfloat16).train()
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    x_bytes = x.numel() * x.element_size()
    copy_ms = time_ms(lambda: x.detach().clone())
    copy_gbs = 2 * x_bytes / copy_ms / 1e6
    must_move = 3 * x_bytes
    print(f"===== {name} {tuple(shape)} bf16: x {x_bytes / 2**20:.0f} MiB; copy "
          f"{copy_ms:.3f} ms = {copy_gbs:.0f} GB/s; a step must move "
          f"{must_move / 2**20:.0f} MiB (x read twice, dx written once)", flush=True)
    steps = {
        "eager": step_fn(module, x),
        "torch.compile": step_fn(torch.compile(module), x),
        "ember": step_fn(ember.frontend.compile(module, backend="inductor"), x),
    }
    results = {}
    for label, step in steps.items():
        ms = time_ms(step)
        results[label] = ms
        gbs = must_move / ms / 1e6
        print(f"  {label:14s} {ms:8.3f} ms  {gbs:7.0f} GB/s  {100 * gbs / copy_gbs:5.1f}% of copy",
              flush=True)
    print(f"  ember / torch.compile speed: {results['torch.compile'] / results['ember']:.2f}x;"
          f" ember / eager: {results['eager'] / results['ember']:.2f}x")
    print("  ember kernels (mean ms a step; GB/s of one pass over x in that time):")
    for kernel, ms in kernel_times(steps["ember"])[:12]:
        gbs = x_bytes / ms / 1e6
        print(f"    {ms:8.3f} ms  {gbs:7.0f} GB/s  {100 * gbs / copy_gbs:5.1f}%  {kernel[:80]}")
    if warps:
        row_warps_sweep(module, x, warps)


def main(argv: list[str]) -> int:
    if not torch.cuda.is_available():
        raise SystemExit("norm_bandwidth.py needs a CUDA GPU")
    warps: list[int] = []
    if "--row-warps" in argv:
        i = argv.index("--row-warps")
        if i + 1 >= len(argv):
            raise SystemExit("norm_bandwidth.py: --row-warps needs a list such as 4,8,16")
        warps = [int(w) for w in argv[i + 1].split(",")]
        argv = argv[:i] + argv[i + 2:]
    names = argv[0].split(",") if argv else list(CASES)
    for name in names:
        make(name)  # unknown names fail before any work
    for name in names:
        run(name, warps)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
