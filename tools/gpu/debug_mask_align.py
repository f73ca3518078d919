"""Which kernel faults when SDPA gets a dense copy of a transposed bf16 mask on CUDA
(the cuda test of ``frontend/tests/test_attention_mask_rule.py`` failed with "misaligned
address"). Each case runs in its own process (a CUDA fault is sticky), with
``CUDA_LAUNCH_BLOCKING=1`` so the error names the faulting call:

    python3 tools/gpu/debug_mask_align.py            # every case
    python3 tools/gpu/debug_mask_align.py CASE       # one case, in this process
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback

CASES = ("eager_strided", "eager_dense", "eager_dense_cudnn", "eager_dense_efficient",
         "eager_expanded_cudnn", "ember")


def _inputs(dense: bool, heads: int = 1):  # type: ignore[no-untyped-def]
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    qkv = [torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16, generator=g)
           .requires_grad_() for _ in range(3)]
    m = torch.randn(2, 1, 128, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    m = m.transpose(-1, -2)
    if dense:
        m = m.expand(2, heads, 128, 128).contiguous()
    return qkv, m


def run(case: str) -> None:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"eager_dense_cudnn": [SDPBackend.CUDNN_ATTENTION],
                "eager_expanded_cudnn": [SDPBackend.CUDNN_ATTENTION],
                "eager_dense_efficient": [SDPBackend.EFFICIENT_ATTENTION]}
    (q, k, v), m = _inputs(case != "eager_strided", 4 if "expanded" in case else 1)
    print(f"{case}: mask {tuple(m.shape)} strides {m.stride()} ptr%256 {m.data_ptr() % 256}")
    if case == "ember":
        import ember.frontend as ef
        from ember.runtime.config import patch

        (q, k, v), m = _inputs(False)
        with patch(logs=frozenset({"output_code"}), capture_cache=False, program_cache=False):
            out = ef.compile(lambda q, k, v, m: F.scaled_dot_product_attention(
                q, k, v, attn_mask=m) * 2)(q, k, v, m)
            torch.cuda.synchronize()
            print("ember forward ok", flush=True)
            out.float().sum().backward()
    else:
        every = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                 SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]
        with sdpa_kernel(backends.get(case, every)):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=m) * 2
            torch.cuda.synchronize()
            print(f"{case} forward ok", flush=True)
            out.float().sum().backward()
    torch.cuda.synchronize()
    print(f"{case}: ok")


def main() -> None:
    if len(sys.argv) > 1:
        try:
            run(sys.argv[1])
        except Exception:  # noqa: BLE001 - printed for the diagnosis
            traceback.print_exc(limit=8)
            print(f"{sys.argv[1]}: FAILED")
        return
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    for case in CASES:
        print(f"===== {case}", flush=True)
        subprocess.run([sys.executable, __file__, case], env=env, timeout=240, check=False)


if __name__ == "__main__":
    main()
