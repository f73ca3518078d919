"""Where a zoo model's fused attention turns into the math form on the GPU: the attention
ops in the program ``ember.frontend.capture`` records, then after the aot stage alone
(``EMBER_LOGS=stages`` timings). ``python3 tools/gpu/debug_capture_attention.py
[hf_bert] [bfloat16] [full]``."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from ember.frontend import capture
from ember.runtime.ir import Program, print_graph

import zoo

WATCH = ("attention", "bmm", "softmax", "_to_copy", "any.", "where", "sdp")


def _ops(program: Program) -> dict[str, int]:
    found: Counter[str] = Counter()
    for graph in program.graphs.values():
        for line in print_graph(graph).splitlines():
            if " = " in line and any(w in line.split(" = ")[1].split("(")[0] for w in WATCH):
                found[line.split(" = ")[1].split("(")[0]] += 1
    return dict(found)


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "hf_bert"
    dtype = getattr(torch, sys.argv[2]) if len(sys.argv) > 2 else torch.bfloat16
    suite = sys.argv[3] if len(sys.argv) > 3 else "full"
    model, inputs = zoo.get(name).make("cuda", dtype, suite)
    with torch.no_grad():
        captured = capture(model, *inputs)
    print("captured:", _ops(captured))
    for line in print_graph(captured.forward).splitlines():
        if "attention" in line and " = aten::" in line:
            print("  ", line[:400])
            break
    from ember.aot.stage import AotStage
    with torch.no_grad():
        after = AotStage().run(captured, {})
    print("after aot:", _ops(after))


if __name__ == "__main__":
    main()
