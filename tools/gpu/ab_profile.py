"""Two of ``ab_matmul_choice.py``'s variants of Ember profiled kernel by kernel, in one
process: where one variant's GPU time goes that the other's does not.

    python3 tools/gpu/ab_profile.py tv_resnet18 bfloat16 ember,ember_no_absorb train

For each variant: the training step (``train``: the bench's forward, backward and SGD
step) or the forward under ``no_grad``, three calls to compile and warm up, then five
profiled. Prints each variant's CUDA total and its kernels that differ most from the
other variant's (by name; each name with the ops it was fused from,
``benchlib/kernel_origins.py``), ``AB_ROWS`` rows (default 25); ``AB_SUITE``: the zoo
suite (default ``full``).
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import zoo
from ab_matmul_choice import VARIANTS
from benchlib.kernel_origins import kernel_origins, origin_of
from benchlib.runner import make_step
from ember.runtime.config import patch
from torch.profiler import ProfilerActivity, profile


def _profiled(label: str, model: torch.nn.Module, inputs: tuple[object, ...],
              train: bool) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Kernel name -> total microseconds over five calls, and the kernels' origins."""
    programs = Path(tempfile.mkdtemp(prefix="ember-ab-profile-"))
    with VARIANTS[label](), patch(debug_dir=programs, program_cache=False,
                                  capture_cache=False):
        step = make_step("ember", copy.deepcopy(model), inputs, train, "inductor")
        with contextlib.nullcontext() if train else torch.no_grad():
            for _ in range(3):
                step()
    torch.cuda.synchronize()
    with contextlib.nullcontext() if train else torch.no_grad(), \
            profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    totals = {e.key: e.self_device_time_total for e in prof.key_averages()
              if e.self_device_time_total > 0}
    return totals, kernel_origins(programs)


def main() -> None:
    name, dtype = sys.argv[1], getattr(torch, sys.argv[2])
    first, second = sys.argv[3].split(",")
    train = sys.argv[4:] == ["train"]
    model, inputs = zoo.get(name).make("cuda", dtype, os.environ.get("AB_SUITE", "full"))
    if train:
        model.train()
    results = {label: _profiled(label, model, inputs, train) for label in (first, second)}
    rows = int(os.environ.get("AB_ROWS", "25"))
    for label, other in ((first, second), (second, first)):
        totals, origins = results[label]
        others = results[other][0]
        print(f"===== {name} {sys.argv[2]} {label}: CUDA total "
              f"{sum(totals.values()) / 1000:.3f} ms over 5 calls "
              f"({other}: {sum(others.values()) / 1000:.3f} ms)")
        diffs = sorted(totals, key=lambda k: -(totals[k] - others.get(k, 0.0)))
        for key in diffs[:rows]:
            gap = totals[key] - others.get(key, 0.0)
            if gap <= 0:
                break
            print(f"  {totals[key]:9.1f} us (+{gap:8.1f})  {key[:70]}  "
                  f"{origin_of(key, origins)[:150]}")


if __name__ == "__main__":
    main()
