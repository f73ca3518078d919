"""Host cost of a Triton launch through Ember's launchers, on the GPU machine.

    python tools/gpu/launch_overhead.py [hf_bert,hf_gpt2] [bfloat16]

1. One tiny generated kernel launched 20,000 times five ways: ``fast`` (the one-frame
   launch a compiled wrapper calls, ``triton_fast_launch``), ``ints`` (the same with its
   pointers passed as addresses: ``triton_fast_launch.POINTERS_AS_INTS``), ``static``
   (the same through torch's C++ launcher: ``config.torch_launcher``), ``launch`` (the
   ``TritonLaunch`` object behind it, with the flat C launch of
   ``triton_binary.flat_launch``) and ``noflat`` (the same without the flat C launch):
   microseconds of host time per launch, the GPU's queue kept from filling by a
   synchronize every 500 launches.
2. For each model named: the bench's Ember training step compiled four times in one
   process (no program cache), its wrappers calling the one-frame launches (``fast``),
   the same with pointers as addresses (``ints``) or through torch's launcher
   (``static``), or the ``TritonLaunch`` objects (``launch``), then each step's host time (the GPU drained before it; median of 20)
   and ``do_bench`` time, in rotating order.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import zoo
from benchlib.runner import make_step
from ember.runtime.compiled import triton_binary, triton_fast_launch
from ember.runtime.config import config, patch
from ember.runtime.compiled.triton_kernel import TritonKernelSpec
from ember.runtime.compiled.triton_launcher import TritonLaunch
from ember.runtime.config import patch

_SOURCE = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def add_one(x, y, n, BLOCK: tl.constexpr):\n"
    "    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
    "    tl.store(y + i, tl.load(x + i, mask=i < n) + 1, mask=i < n)\n"
)


@contextlib.contextmanager
def flat_off() -> Iterator[None]:
    """Bindings made in the block launch through the launcher object (no flat launch)."""
    original = triton_binary.flat_launch
    triton_binary.flat_launch = lambda launcher: None
    try:
        yield
    finally:
        triton_binary.flat_launch = original


def pointer_ints() -> Any:
    """One-frame launches made in the block pass their pointers as addresses."""
    return mock.patch.object(triton_fast_launch, "POINTERS_AS_INTS", True)


def static_launches() -> Any:
    """Binaries bound in the block launch through torch's C++ launcher."""
    return patch(torch_launcher=True)


def launch_objects() -> Any:
    """Wrappers loaded in the block call the ``TritonLaunch`` objects."""
    return mock.patch.object(TritonLaunch, "fast_call", lambda self: self)


def per_launch_us(mode: str, launches: int = 20_000) -> float:
    spec = TritonKernelSpec("add_one", _SOURCE, {"x": "*fp32", "y": "*fp32", "n": "i32"},
                            {"BLOCK": 128})
    launcher = TritonLaunch(spec, (1, 1, 1))
    with pointer_ints() if mode == "ints" else contextlib.nullcontext():
        launch = launcher.fast_call() if mode in ("fast", "ints", "static") else launcher
    x = torch.randn(128, device="cuda")
    y = torch.empty_like(x)
    context = {"noflat": flat_off, "static": static_launches}.get(mode, contextlib.nullcontext)
    with context():
        launch(x, y, 128)  # binds
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(launches):
        launch(x, y, 128)
        if i % 500 == 499:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x + 1)
    return (time.perf_counter() - start) / launches * 1e6


def host_ms(step: Any, steps: int = 20) -> float:
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def main() -> None:
    config.torch_launcher = False  # every other mode is against Triton's own launcher
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else []
    dtype = getattr(torch, sys.argv[2] if len(sys.argv) > 2 else "bfloat16")
    for mode in ("fast", "ints", "static", "launch", "noflat") * 2:
        print(f"tiny kernel, {mode}: {per_launch_us(mode):.2f} us per launch", flush=True)
    for name in names:
        base, inputs = zoo.get(name).make(torch.device("cuda"), dtype, "full")
        steps = {}
        labels = ("fast", "ints", "static", "launch")
        for label in labels:
            # no program cache: each step's wrapper loads its own kernels
            context = {"launch": launch_objects, "ints": pointer_ints,
                       "static": static_launches}.get(label, contextlib.nullcontext)
            with context(), patch(program_cache=False, capture_cache=False):
                step = make_step("ember", copy.deepcopy(base), inputs, True, "inductor")
                for _ in range(3):
                    step()
            steps[label] = step
        torch.cuda.synchronize()
        print(f"===== {name} train", flush=True)
        for turn in range(len(labels)):
            for label in labels[turn:] + labels[:turn]:
                ms = float(triton.testing.do_bench(steps[label], return_mode="median"))  # type: ignore[arg-type]
                print(f"  {label:9} do_bench {ms:7.2f} ms  host {host_ms(steps[label]):7.2f} ms",
                      flush=True)
        del steps, base, inputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
