"""Where a compiled zoo model's inference peak comes from on the GPU: runs eager,
torch.compile and Ember on one model and, for each, prints the peak above the
weights and inputs and the largest allocations alive at that peak with the Python
frames that made them (the allocator's recorded history).
``python3 tools/gpu/debug_memory.py hf_bert [bfloat16] [full]``."""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ember.frontend
import torch
import zoo

MiB = 2**20


def _frames(block: dict[str, Any]) -> str:
    frames = block.get("frames") or []
    useful = [f for f in frames if f.get("filename", "").endswith(".py")
              and "torch/cuda/memory" not in f["filename"]]
    return " <- ".join(f"{Path(f['filename']).name}:{f['line']} {f['name']}"
                       for f in useful[:4]) or "(no Python frame)"


def peak_report(name: str, fn: Any, inputs: tuple[Any, ...]) -> None:
    with torch.no_grad():
        fn(*inputs)  # compile and warm up outside the measurement
        torch.cuda.synchronize()
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        record = torch.cuda.memory._record_memory_history  # noqa: SLF001 (a debug tool)
        record(max_entries=200_000, stacks="python")
        out = fn(*inputs)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        snapshot = torch.cuda.memory._snapshot()  # noqa: SLF001
        record(enabled=None)
    del out
    print(f"===== {name}: peak {peak / MiB:.0f} MiB above {before / MiB:.0f} MiB")
    # replay the trace to find the allocations alive at the peak
    live: dict[int, tuple[int, str]] = {}
    best: dict[int, tuple[int, str]] = {}
    total = top = 0
    for trace in snapshot.get("device_traces", [[]])[0:1]:
        for event in trace:
            action, addr, size = event["action"], event["addr"], event["size"]
            if action == "alloc":
                live[addr] = (size, _frames(event))
                total += size
                if total > top:
                    top, best = total, dict(live)
            elif action == "free_completed" and addr in live:
                total -= live.pop(addr)[0]
    rows = sorted(best.values(), key=lambda r: -r[0])[:15]
    print(f"  traced peak {top / MiB:.0f} MiB; largest alive then:")
    for size, where in rows:
        print(f"  {size / MiB:9.1f} MiB  {where}")


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else "hf_bert"
    dtype = getattr(torch, sys.argv[2]) if len(sys.argv) > 2 else torch.bfloat16
    suite = sys.argv[3] if len(sys.argv) > 3 else "full"
    module, inputs = zoo.registry.get(model).make("cuda", dtype, suite)
    peak_report("eager", module, inputs)
    peak_report("torch", torch.compile(module), inputs)
    peak_report("ember", ember.frontend.compile(module), inputs)


if __name__ == "__main__":
    main()
