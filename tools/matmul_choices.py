"""The default heuristic's matmul choices for zoo models, on a GPU this machine need not
have: each model is captured and run through aot on the CPU, its graphs lowered for CUDA
(``benchlib/static_memory.py``) with a Hopper's capability assumed (the TMA variant's
rules), and every ``EMBER_LOGS=autotune`` line counted by shape and choice. No kernel is
built or run.

    python tools/matmul_choices.py hf_llama,gpt [--train] [--dtype bfloat16] [--suite full]
        [--capability 9.0]

A heuristic change shows here before it runs on a GPU: which matmuls flip between a
template and cuBLAS (``tools/gpu/ab_matmul_choice.py`` then times both on the device).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from benchlib.static_memory import inference_program, training_program
from ember.inductor.codegen.triton.matmul_tma import assume_capability
from ember.inductor.idle_templates import lower_and_schedule
from ember.inductor.loop_ir.symbolic_index import size_hints
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.runtime.config import patch
from ember.runtime.ir import symbolic

#: ``[ember.autotune] matmul mm [M=.., N=.., K=..] torch.bfloat16: CHOICE (how)...``
_LINE = re.compile(r"matmul (\w+) \[([^\]]*)\] torch\.(\w+): ([^;]*)")


def choices(name: str, train: bool, dtype: torch.dtype, suite: str,
            capability: tuple[int, int]) -> collections.Counter[str]:
    """``"op [sizes] dtype: choice"`` -> how many of model ``name``'s matmuls get it (the
    heuristic's log lines; a template that fuses nothing is counted once more as
    ``extern (no epilogue fused)``: the compile lowers it as cuBLAS)."""
    device = torch.device("cuda")
    make = training_program if train else inference_program
    program = make(name, device, dtype, suite)
    err = io.StringIO()
    with assume_capability(capability), patch(logs="autotune"), \
            contextlib.redirect_stderr(err):
        for graph_name, graph in program.graphs.items():
            hints = {s: symbolic.hint_of(s, r) for s, r in graph.symbols.items()}
            with size_hints(hints, graph.symbols):
                lower_and_schedule(lambda idle, g=graph_name: GraphLowering(
                    program, g, device, extern_matmuls=idle).run())
    found: collections.Counter[str] = collections.Counter()
    for line in err.getvalue().splitlines():
        match = _LINE.search(line)
        if match:
            op, sizes, dt, choice = match.groups()
            found[f"{op} [{sizes}] {dt}: {choice.strip()}"] += 1
        elif "no epilogue fused" in line:
            found["extern (no epilogue fused into its template)"] += 1
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models")
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--suite", default="full")
    parser.add_argument("--capability", default="9.0")
    args = parser.parse_args(argv)
    major, minor = (int(p) for p in args.capability.split("."))
    for name in args.models.split(","):
        found = choices(name, args.train, getattr(torch, args.dtype), args.suite,
                        (major, minor))
        templates = sum(n for k, n in found.items() if ": extern" not in k
                        and not k.startswith("extern"))
        idle = found["extern (no epilogue fused into its template)"]
        print(f"===== {name} {'train' if args.train else 'infer'} {args.dtype}: "
              f"{templates - idle} templates")
        for key, count in sorted(found.items()):
            print(f"  {count:4d} x {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
