"""Which attention kernel ``scaled_dot_product_attention`` becomes when Ember records it
on the GPU: eager's backend choice (``aten._fused_sdp_choice``), the choice under a bare
FakeTensorMode, and the ops a GraphRecorder records for it, for several argument forms
(plain, HF-style transposed views, an additive mask, requires_grad). On the H200 in
session 19 HF BERT's SDPA was recorded as the fp32 math path (two bmm and a safe softmax).
``python3 tools/gpu/debug_sdpa_choice.py [bfloat16]``."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import torch
import torch.nn.functional as F
from ember.runtime.ir import InputSpec, print_graph
from ember.runtime.tracing import GraphRecorder
from torch._subclasses.fake_tensor import FakeTensorMode  # a debug tool, not a package

B, H, S, D = 16, 12, 512, 64


def _cases(dtype: torch.dtype) -> dict[str, tuple[list[torch.Tensor], dict[str, Any]]]:
    def qkv() -> list[torch.Tensor]:
        return [torch.randn(B, H, S, D, device="cuda", dtype=dtype) for _ in range(3)]

    def views() -> list[torch.Tensor]:  # HF: (B, S, H*D) -> view -> transpose(1, 2)
        return [torch.randn(B, S, H * D, device="cuda", dtype=dtype).view(B, S, H, D)
                .transpose(1, 2) for _ in range(3)]

    additive = torch.zeros(B, 1, 1, S, device="cuda", dtype=dtype).expand(B, 1, S, S)
    # what HF BERT builds under a compiler (strict capture): a [B, 1, S, S] where() mask
    bert_mask = torch.zeros(B, 1, S, S, device="cuda", dtype=dtype)
    return {
        "bert mask": (views(), {"attn_mask": bert_mask, "scale": 0.125}),
        "plain": (qkv(), {}),
        "views": (views(), {}),
        "additive mask": (views(), {"attn_mask": additive}),
        "requires_grad": ([t.requires_grad_() for t in qkv()], {}),
    }


def _can_use(what: str, qkv: list[torch.Tensor], mask: torch.Tensor | None) -> None:
    """Each fused backend's own checks (``debug=True`` makes torch warn why not)."""
    import warnings

    params = torch.backends.cuda.SDPAParams(qkv[0], qkv[1], qkv[2], mask, 0.0, False, False)
    for name in ("flash", "efficient", "cudnn"):
        check = getattr(torch.backends.cuda, f"can_use_{name}_attention")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ok = check(params, True)
        why = "; ".join(str(w.message).splitlines()[0] for w in caught)[:300]
        print(f"  {what} can_use_{name}: {ok} {why}")


def main() -> None:
    dtype = getattr(torch, sys.argv[1]) if len(sys.argv) > 1 else torch.bfloat16
    choice = torch.ops.aten._fused_sdp_choice.default
    for name, (tensors, kwargs) in _cases(dtype).items():
        print(f"===== {name}")
        print("eager choice:", choice(*tensors, **kwargs))
        mask = kwargs.get("attn_mask")
        _can_use("real", tensors, mask)
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fakes = [mode.from_tensor(t) for t in tensors]
            fkw = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
                   for k, v in kwargs.items()}
            print("fake choice:", choice(*fakes, **fkw))
            _can_use("fake", fakes, fkw.get("attn_mask"))
        rec = GraphRecorder()
        args = [rec.add_input(t, InputSpec(n)) for t, n in zip(tensors, "qkv")]
        mask = {k: rec.add_input(v, InputSpec(k)) if isinstance(v, torch.Tensor) else v
                for k, v in kwargs.items()}
        with rec:
            out = F.scaled_dot_product_attention(args[0], args[1], args[2], **mask)
        graph = rec.finish([out]).forward
        text = print_graph(graph)
        ops = Counter(line.split("(")[0].split("= ")[-1] for line in text.splitlines()
                      if " = " in line)
        print("recorded:", dict(ops))
        if name == "plain":
            print(text)


if __name__ == "__main__":
    main()
