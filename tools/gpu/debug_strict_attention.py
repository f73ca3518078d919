"""The attention lines of the graph that ``ember.frontend.compile``'s default (strict)
capture records for a zoo model on the GPU, with their source lines: which Python line
made each attention-related op (``EMBER_LOGS=graphs``). Compare with
``debug_capture_attention.py`` (the tracing capture).
``python3 tools/gpu/debug_strict_attention.py [hf_bert] [bfloat16] [full]``."""

from __future__ import annotations

import contextlib
import io
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ember.frontend
import torch
import zoo
from ember.runtime.config import patch

WATCH = ("attention", "bmm", "softmax", "_to_copy", "aten::any", "aten::where", "sdp")


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "hf_bert"
    dtype = getattr(torch, sys.argv[2]) if len(sys.argv) > 2 else torch.bfloat16
    suite = sys.argv[3] if len(sys.argv) > 3 else "full"
    model, inputs = zoo.get(name).make("cuda", dtype, suite)
    print("grad enabled at capture:", torch.is_grad_enabled())
    _show(lambda: ember.frontend.compile(model)(*inputs), "math backend on")
    # With the math backend disabled, the capture must record a fused kernel or fail: the
    # graph (or the fallback warnings, printed) says which, and torch says why each fused
    # kernel was rejected when none is taken.
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model, inputs = zoo.get(name).make("cuda", dtype, suite)
    fused = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
             SDPBackend.FLASH_ATTENTION]
    with sdpa_kernel(fused):
        _show(lambda: ember.frontend.compile(model)(*inputs), "math backend off")


def _show(run: Callable[[], object], title: str) -> None:
    """Run ``run`` under no_grad with the graphs logged; print its attention lines, its
    warnings (an eager fallback says so) and whatever it raised."""
    err = io.StringIO()
    # NOTE: the caches off: a second compile of the model would reuse the first's
    # captured program and log no graph (session 20's "compiled" said nothing)
    with torch.no_grad(), patch(logs=frozenset({"graphs", "fallbacks"}), capture_cache=False,
                                program_cache=False), \
            contextlib.redirect_stderr(err), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            run()
            outcome = "compiled"
        except Exception as e:  # noqa: BLE001 - a debug tool prints whatever torch raised
            outcome = f"{type(e).__name__}: {str(e)[:1500]}"
    print(f"===== {title}: {outcome}")
    shown = 0
    for line in err.getvalue().splitlines():
        if " = " in line and any(w in line.split(" = ")[1].split("(")[0] for w in WATCH):
            print(line[:700])
            shown += 1
            if shown >= 14:
                break
    print(f"({len(err.getvalue().splitlines())} log lines)")
    for line in [x for x in err.getvalue().splitlines() if "break" in x.lower()][:6]:
        print("break:", line[:400])
    for text in dict.fromkeys(f"{w.category.__name__}: {str(w.message)[:400]}" for w in caught):
        print(f"warning: {text}")
    _ancestry(err.getvalue().splitlines(), "aten::where")


def _ancestry(lines: list[str], op: str, depth: int = 10) -> None:
    """Print the first ``op`` node of the log and the nodes it reads, ``depth`` deep, with
    their sizes and strides: where the attention mask comes from and its layout."""
    defs: dict[str, str] = {}
    for line in lines:
        m = re.match(r"\s*%([\w.]+): .* = ", line)
        if m and m.group(1) not in defs:
            defs[m.group(1)] = line
    start = next((n for n, line in defs.items() if f"= {op}" in line), None)
    if start is None:
        return
    print(f"--- the first {op} and what it reads")
    todo, seen = [(start, 0)], set()
    while todo:
        name, d = todo.pop(0)
        if name in seen or name not in defs or d > depth:
            continue
        seen.add(name)
        line = defs[name]
        print("  " * d + line.split("  #")[0].strip()[:300])
        call = line.split(" = ", 1)[1].split("  #")[0]
        todo += [(ref, d + 1) for ref in re.findall(r"%([\w]+)", call)]

if __name__ == "__main__":
    main()
