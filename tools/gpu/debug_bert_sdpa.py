"""Which attention ops a zoo model's SDPA becomes at each Ember boundary on the GPU: the
arguments the model passes to ``F.scaled_dot_product_attention`` (shapes, strides, dtypes,
mask), eager's backend choice for them, then the attention-related op counts in the
captured program and after each stage (``EMBER_DEBUG_DIR`` copies in
``/tmp/ember-debug-sdpa``). ``python3 tools/gpu/debug_bert_sdpa.py [hf_bert] [bfloat16] [full]``."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import zoo

WATCH = ("attention", "bmm", "softmax", "baddbmm", "matmul", "_to_copy", "where", "any")


def _meta(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"{x.dtype} {tuple(x.shape)} stride {x.stride()} {x.device}"
    return repr(x)


class _Sdpa(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            self.calls.append((args, kwargs))
        return func(*args, **kwargs)


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "hf_bert"
    dtype = getattr(torch, sys.argv[2]) if len(sys.argv) > 2 else torch.bfloat16
    suite = sys.argv[3] if len(sys.argv) > 3 else "full"
    out = Path("/tmp/ember-debug-sdpa")  # whole programs with weights: not copied back
    os.environ["EMBER_DEBUG_DIR"] = str(out)
    import ember.frontend  # after EMBER_DEBUG_DIR is set

    model, inputs = zoo.get(name).make("cuda", dtype, suite)
    print("sdp enabled: flash", torch.backends.cuda.flash_sdp_enabled(), "mem_efficient",
          torch.backends.cuda.mem_efficient_sdp_enabled(), "math",
          torch.backends.cuda.math_sdp_enabled(), "cudnn", torch.backends.cuda.cudnn_sdp_enabled())
    with torch.no_grad(), _Sdpa() as spy:
        model(*inputs)
    if spy.calls:
        args, kwargs = spy.calls[0]
        print(f"{len(spy.calls)} SDPA calls; the first:")
        for a in args:
            print("  arg", _meta(a))
        for k, v in kwargs.items():
            print("  kwarg", k, _meta(v))
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
        print("eager choice:", torch.ops.aten._fused_sdp_choice.default(
            *tensors[:3], mask, kwargs.get("dropout_p", 0.0), kwargs.get("is_causal", False)))
    else:
        print("the model made no SDPA call")
    with torch.no_grad():
        ember.frontend.compile(model)(*inputs)
    from ember.runtime.ir import print_graph
    from ember.runtime.ir.serialize import load
    for path in sorted(out.glob("*.ember")):
        program = load(path, trusted=True)
        for gname, graph in program.graphs.items():
            text = print_graph(graph)
            ops = Counter(line.split(" = ")[1].split("(")[0] for line in text.splitlines()
                          if " = " in line and "aten::" in line)
            picked = {k: v for k, v in ops.items() if any(w in k for w in WATCH)}
            print(f"{path.name} {gname}: {picked}")


if __name__ == "__main__":
    main()
