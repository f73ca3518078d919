"""The attention lines of the graph that ``ember.frontend.compile``'s default (strict)
capture records for a zoo model on the GPU, with their source lines: which Python line
made each attention-related op (``EMBER_LOGS=graphs``). Compare with
``debug_capture_attention.py`` (the tracing capture).
``python3 tools/gpu/debug_strict_attention.py [hf_bert] [bfloat16] [full]``."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ember.frontend
import torch
from ember.runtime.config import patch

import zoo

WATCH = ("attention", "bmm", "softmax", "_to_copy", "aten::any", "aten::where", "sdp")


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "hf_bert"
    dtype = getattr(torch, sys.argv[2]) if len(sys.argv) > 2 else torch.bfloat16
    suite = sys.argv[3] if len(sys.argv) > 3 else "full"
    model, inputs = zoo.get(name).make("cuda", dtype, suite)
    print("grad enabled at capture:", torch.is_grad_enabled())
    err = io.StringIO()
    with torch.no_grad(), patch(logs=frozenset({"graphs"})), contextlib.redirect_stderr(err):
        ember.frontend.compile(model)(*inputs)
    shown = 0
    for line in err.getvalue().splitlines():
        if " = " in line and any(w in line.split(" = ")[1].split("(")[0] for w in WATCH):
            print(line[:700])
            shown += 1
            if shown >= 14:
                break
    print(f"({len(err.getvalue().splitlines())} log lines)")
    # With the math backend disabled, torch raises and says why each fused kernel was
    # rejected for the arguments the strict capture passes.
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model, inputs = zoo.get(name).make("cuda", dtype, suite)
    fused = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
             SDPBackend.FLASH_ATTENTION]
    try:
        with torch.no_grad(), sdpa_kernel(fused), contextlib.redirect_stderr(io.StringIO()):
            ember.frontend.compile(model)(*inputs)
        print("without the math backend: compiled")
    except Exception as e:  # noqa: BLE001 - a debug tool prints whatever torch raised
        print(f"without the math backend: {type(e).__name__}: {str(e)[:1500]}")


if __name__ == "__main__":
    main()
