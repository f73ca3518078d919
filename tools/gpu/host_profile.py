"""Where a compiled step's host time goes (H200 diagnosis): the bench's Ember step of
each model, warmed, then ten steps under cProfile; prints the top functions by own time
and by cumulative time.

    python tools/gpu/host_profile.py hf_bert,hf_gpt2 bfloat16 train [ROWS] [COMPILERS]

COMPILERS (default ``ember``) may name ``torch`` too, ``torch,ember``, to read the two
profiles side by side.
"""

from __future__ import annotations

import copy
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import zoo
from benchlib.runner import make_step


def main() -> None:
    names, dtype = sys.argv[1].split(","), getattr(torch, sys.argv[2])
    train = sys.argv[3] == "train"
    rows = int(sys.argv[4]) if len(sys.argv) > 4 else 35
    compilers = sys.argv[5].split(",") if len(sys.argv) > 5 else ["ember"]
    for name, compiler in ((n, c) for n in names for c in compilers):
        base, inputs = zoo.get(name).make(torch.device("cuda"), dtype, "full")
        step = make_step(compiler, copy.deepcopy(base), inputs, train, "inductor")
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        for _ in range(10):
            step()
        profiler.disable()
        host = (time.perf_counter() - start) * 100
        torch.cuda.synchronize()
        print(f"===== {name} {compiler} {sys.argv[2]} {sys.argv[3]}: {host:.2f} ms a step under cProfile",
              flush=True)
        for key in ("tottime", "cumtime"):
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats(key).print_stats(rows)
            print(out.getvalue(), flush=True)
        del step, base, inputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
