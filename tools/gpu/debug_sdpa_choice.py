"""Which attention kernel ``scaled_dot_product_attention`` becomes when Ember records it
on the GPU: eager's backend choice (``aten._fused_sdp_choice``), the choice under a bare
FakeTensorMode, and the ops a GraphRecorder records for it (on the H200, session 19, HF
BERT's SDPA was recorded as the fp32 math path: two bmm and a safe softmax).
``python3 tools/gpu/debug_sdpa_choice.py [bfloat16]``."""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from ember.runtime.ir import InputSpec, print_graph
from ember.runtime.tracing import GraphRecorder
from torch._subclasses.fake_tensor import FakeTensorMode  # a debug tool, not a package


def main() -> None:
    dtype = getattr(torch, sys.argv[1]) if len(sys.argv) > 1 else torch.bfloat16
    q, k, v = (torch.randn(16, 12, 512, 64, device="cuda", dtype=dtype) for _ in range(3))
    choice = torch.ops.aten._fused_sdp_choice.default
    print("eager choice:", choice(q, k, v))
    with FakeTensorMode() as mode:
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        print("fake choice:", choice(fq, fk, fv))
    rec = GraphRecorder()
    args = [rec.add_input(t, InputSpec(n)) for t, n in zip((q, k, v), "qkv")]
    with rec:
        out = F.scaled_dot_product_attention(args[0], args[1], args[2])
    print(print_graph(rec.finish([out]).forward))


if __name__ == "__main__":
    main()
