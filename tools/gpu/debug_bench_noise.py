"""Why a model's bench time moves between runs (H200 diagnosis): the bench's steps for
eager, torch.compile and Ember built in one process, as ``tools/bench.py`` does, then
each timed three ways, twice, in alternating order: ``do_bench`` (the bench's
measure), ``do_bench`` with the garbage collector off, and the median of synchronized
wall times; with the number of garbage collections each ``do_bench`` run saw.

    python tools/gpu/debug_bench_noise.py hf_gpt2,hf_llama bfloat16 train
"""

from __future__ import annotations

import copy
import gc
import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import zoo
from benchlib.runner import make_step
from profile_gaps import wall_ms  # the script's folder is on sys.path

_collections = [0]
gc.callbacks.append(lambda phase, info: _collections.__setitem__(
    0, _collections[0] + (phase == "start")))


def bench_ms(step: object, gc_off: bool) -> tuple[float, int]:
    before = _collections[0]
    if gc_off:
        gc.disable()
    try:
        ms = float(triton.testing.do_bench(step, return_mode="median"))  # type: ignore[arg-type]
    finally:
        gc.enable()
    return ms, _collections[0] - before


def main() -> None:
    names, dtype = sys.argv[1].split(","), getattr(torch, sys.argv[2])
    train = "train" in sys.argv[3:]
    for name in names:
        base, inputs = zoo.get(name).make(torch.device("cuda"), dtype, "full")
        steps = {c: make_step(c, copy.deepcopy(base), inputs, train, "inductor")
                 for c in ("eager", "torch", "ember")}
        for step in steps.values():
            for _ in range(3):
                step()
        torch.cuda.synchronize()
        print(f"===== {name} {sys.argv[2]} {'train' if train else 'infer'}; "
              f"gc objects tracked: {len(gc.get_objects())}", flush=True)
        for order in (list(steps), list(reversed(steps))):
            for compiler in order:
                step = steps[compiler]
                on, n_on = bench_ms(step, gc_off=False)
                off, _ = bench_ms(step, gc_off=True)
                print(f"  {compiler:6} do_bench {on:7.2f} ms ({n_on} collections), "
                      f"gc off {off:7.2f} ms, synced wall {wall_ms(step):7.2f} ms", flush=True)
        del steps, base, inputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
