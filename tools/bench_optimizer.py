"""Time one optimizer step: eager, ``ember.frontend.compile(opt.step)`` and
``torch.compile(opt.step)``, on a ~10M-parameter MLP (issue #19 item 4).

    OMP_NUM_THREADS=1 python tools/bench_optimizer.py [--params 10] [--repeats 30] [--width 1024]
    python tools/bench_optimizer.py --device cuda --params 100 --optimizers "AdamW foreach"

Prints one markdown table row per optimizer: the median time per step of each, in one
process, and the ``aten::copy_`` calls per Ember step (mutated inputs the runtime copied
instead of the kernels writing them in place, Python numbers made tensors by eager CPU
ops; 0 once every update is written in place). On CUDA the copies are counted as
``into the GPU / all``: copies into CUDA tensors and host-to-device transfers (0 once the
CPU ``state['step']`` reaches the kernels as a scalar argument, ``lowering/host_scalars.py``
in the inductor), then every copy (the CPU step counters' new values are still copied
back on the CPU, two per parameter); and the kernels a step launches on the GPU (one per
parameter shape once the updates fuse side by side). The gradients are set once; every
step updates the parameters and state in place, as training does. The load average is
printed before and after (the numbers are only comparable within one run on a shared
machine). On CUDA each step is timed between device synchronisations.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode  # a tool, not a package

OPTIMIZERS: list[tuple[str, type[torch.optim.Optimizer], dict[str, Any]]] = [
    ("SGD momentum", torch.optim.SGD, {"lr": 0.01, "momentum": 0.9, "foreach": False}),
    ("Adam", torch.optim.Adam, {"lr": 1e-3, "foreach": False}),
    ("AdamW foreach", torch.optim.AdamW, {"lr": 1e-3, "foreach": True}),
]


def _model(millions: float, width: int = 1024, device: str = "cpu") -> nn.Module:
    torch.manual_seed(0)
    layers = max(1, round(millions * 1e6 / (width * width + width)))
    model = nn.Sequential(*(nn.Linear(width, width) for _ in range(layers))).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    return model


class _Copies(TorchDispatchMode):
    """Counts ``aten::copy_`` calls, and those into CUDA tensors plus host-to-device
    transfers (``_to_copy`` of a CPU tensor onto the GPU)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.all = 0
        self.into_gpu = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.copy_.default:
            self.all += 1
            self.into_gpu += int(args[0].is_cuda)
        elif (func is torch.ops.aten._to_copy.default and isinstance(result, torch.Tensor)
              and result.is_cuda and not args[0].is_cuda):
            self.into_gpu += 1
        return result


def _copies(step: Callable[[], Any], device: str) -> str:
    """The copies one step makes (see the module doc): ``N`` on the CPU, ``G / N`` on
    CUDA."""
    with _Copies() as counter:
        step()
    _sync(device)
    return f"{counter.into_gpu} / {counter.all}" if device == "cuda" else str(counter.all)


def _kernels(step: Callable[[], Any], device: str) -> str:
    """The GPU kernels (and memory copies) one step launches, or "-" on the CPU."""
    if device != "cuda":
        return "-"
    from torch.profiler import DeviceType, ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        _sync(device)
    return str(sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA))


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _median_ms(step: Callable[[], Any], repeats: int, device: str = "cpu") -> float:
    for _ in range(3):
        step()  # the first steps make the state and compile
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", type=float, default=10.0, help="millions of parameters")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--width", type=int, default=1024,
                        help="features of each Linear layer (64: many small parameters)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--optimizers", default=",".join(n for n, _, _ in OPTIMIZERS),
                        help="comma-separated names from the table")
    args = parser.parse_args()
    wanted = set(args.optimizers.split(","))
    import ember.frontend as ef

    params = list(_model(args.params, args.width, args.device).parameters())
    print(f"{sum(p.numel() for p in params) / 1e6:.1f}M parameters in {len(params)} "
          f"tensors, torch threads {torch.get_num_threads()}, {_load()}")
    copied = "into the GPU / all" if args.device == "cuda" else "all"
    print("| optimizer | eager | torch.compile | ember | ember / eager | ember / torch.compile "
          f"| ember copies a step ({copied}) | GPU kernels a step (eager, torch.compile, "
          "ember) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, cls, kw in (o for o in OPTIMIZERS if o[0] in wanted):
        times = []
        copies = ""
        kernels = []
        for make in (lambda s: s, torch.compile, ef.compile):
            model = _model(args.params, args.width, args.device)
            opt = cls(model.parameters(), **kw)
            step = make(opt.step)
            times.append(_median_ms(step, args.repeats, args.device))
            kernels.append(_kernels(step, args.device))
            copies = _copies(step, args.device)  # the last one: Ember's
        eager, torch_c, ember = times
        print(f"| {name} | {eager:.2f} ms | {torch_c:.2f} ms | {ember:.2f} ms | "
              f"{eager / ember:.2f}x | {torch_c / ember:.2f}x | {copies} | "
              f"{', '.join(kernels)} |")
    print(_load())


if __name__ == "__main__":
    main()
