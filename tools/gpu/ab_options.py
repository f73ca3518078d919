"""A/B of Ember options on the H200: the bench's step of each model built by
torch.compile and by Ember under each option set, in one process, each timed twice in
alternating order (``do_bench`` median, synchronized wall median, and the host time of
one step's Python: its call without waiting for the GPU).

    python tools/gpu/ab_options.py hf_bert,hf_gpt2 bfloat16 train "precompile_triton=false" "precompile_triton=true"

Each later argument is one Ember option set (``k=v,k=v``; ``-`` for the defaults;
``mode=max-autotune`` in a set is the compile's mode, not an option). The option sets
are compiled in the order given: a binary built ahead of launch by one set
(``precompile_triton``) is in the process's table for the sets after it.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import zoo
from benchlib.compilers import parse_ember_options
from benchlib.runner import make_step
from profile_gaps import wall_ms  # the script's folder is on sys.path


def host_ms(step: object, steps: int = 10) -> float:
    """The median time of a step's Python alone (the GPU drained before each)."""
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()  # type: ignore[operator]
        times.append((time.perf_counter() - start) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def main() -> None:
    names, dtype = sys.argv[1].split(","), getattr(torch, sys.argv[2])
    train = sys.argv[3] == "train"
    option_sets = sys.argv[4:] or ["-"]
    for name in names:
        base, inputs = zoo.get(name).make(torch.device("cuda"), dtype, "full")
        steps = {"torch": make_step("torch", copy.deepcopy(base), inputs, train, "inductor")}
        for text in option_sets:
            options = {} if text == "-" else parse_ember_options(text.split(","))
            mode = options.pop("mode", None)
            steps[f"ember[{text}]"] = make_step("ember", copy.deepcopy(base), inputs, train,
                                                "inductor", mode, ember_options=options)
        for step in steps.values():
            for _ in range(3):
                step()
        torch.cuda.synchronize()
        print(f"===== {name} {sys.argv[2]} {sys.argv[3]}", flush=True)
        for order in (list(steps), list(reversed(steps))):
            for label, step in ((k, steps[k]) for k in order):
                ms = float(triton.testing.do_bench(step, return_mode="median"))  # type: ignore[arg-type]
                print(f"  {label:36} do_bench {ms:7.2f} ms, synced wall {wall_ms(step):7.2f} ms,"
                      f" host {host_ms(step):7.2f} ms", flush=True)
        del steps, base, inputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
