"""A training step's kernels, counted (H200 diagnosis): how many GPU kernels one step of
each compiler launches, by kind, with their GPU time; and Ember's compiled programs
written out (``EMBER_DEBUG_DIR``) for reading on any machine.

    OUT=$OUT python tools/gpu/step_census.py hf_llama,gpt bfloat16 [train]

For each model, each compiler's step (the bench's) is warmed up three times, then one
step runs under the torch profiler. The report groups the step's GPU kernels: Triton
(generated), GEMM (cuBLAS/CUTLASS), attention (SDPA's), ATen's own and other, each with
its launch count and total microseconds. Ember's programs go to ``$OUT/programs.tar.gz``
(``programs/<model>/``, each stage's ``.ember``: one file, since the device tool brings
back only a few; ``python -m ember.runtime show FILE`` prints one).
"""

from __future__ import annotations

import collections
import copy
import os
import shutil
import sys
import tarfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import zoo
from benchlib.runner import make_step
from ember.runtime.config import patch

_KINDS = (
    ("attention", ("sdpa", "flash", "fmha", "attention")),
    ("gemm", ("gemm", "nvjet", "cutlass", "sm90_xmma", "cublas")),
    ("aten", ("at::native", "at_cuda_detail", "cudnn::", "void at::")),
)


def kind_of(name: str) -> str:
    """The census group of a GPU kernel's name."""
    lowered = name.lower()
    for kind, marks in _KINDS:
        if any(m.lower() in lowered for m in marks):
            return kind
    if name.startswith(("triton_", "kernel")) or "_kernel" in name:
        return "triton"
    return "other"


def census(step: object) -> dict[str, list[float]]:
    """{kind: [launches, total us]} of one call of ``step`` (a callable)."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()  # type: ignore[operator]
        torch.cuda.synchronize()
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            row = totals[kind_of(event.name)]
            row[0] += 1
            row[1] += event.device_time
    return dict(totals)


def main() -> None:
    names, dtype = sys.argv[1].split(","), getattr(torch, sys.argv[2])
    train = len(sys.argv) < 4 or sys.argv[3] == "train"
    out = Path(os.environ.get("OUT", "/tmp"))
    for name in names:
        print(f"===== {name} {sys.argv[2]} {'train' if train else 'infer'}", flush=True)
        base, inputs = zoo.get(name).make(torch.device("cuda"), dtype, "full")
        for compiler in ("torch", "ember"):
            step = make_step(compiler, copy.deepcopy(base), inputs, train, "inductor")
            with patch(debug_dir=out / "programs" / name):  # the first call compiles
                for _ in range(3):
                    step()
            rows = census(step)
            total = sum(r[0] for r in rows.values()), sum(r[1] for r in rows.values())
            parts = "  ".join(f"{k} {int(n)} / {us / 1e3:.2f} ms" for k, (n, us)
                              in sorted(rows.items()))
            print(f"  {compiler:6} {int(total[0])} kernels / {total[1] / 1e3:.2f} ms:  {parts}",
                  flush=True)
            del step
        del base, inputs
        torch.cuda.empty_cache()
    programs = out / "programs"
    if programs.is_dir():
        with tarfile.open(out / "programs.tar.gz", "w:gz") as archive:
            archive.add(programs, arcname="programs")
        shutil.rmtree(programs)


if __name__ == "__main__":
    main()
