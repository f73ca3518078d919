"""Time every matmul template config against cuBLAS on the issue-16 shapes (H200 tuning).

    python tools/gpu/matmul_sweep.py > $OUT/matmul_sweep.txt

Each workload is compiled once per choice (``forced_matmul``: the extern, or one config
of the template) and timed with ``triton.testing.do_bench`` beside eager; the table says
which choice wins per shape, the data behind ``matmul_configs.CONFIGS`` and the default
heuristic.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

os.environ["EMBER_PROGRAM_CACHE"] = "0"  # each forced choice compiles (same program text)

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import ember.frontend as ef
from ember.inductor.codegen.triton.matmul_choice import forced_matmul
from ember.inductor.codegen.triton.matmul_configs import CONFIGS, MatmulConfig

EXTRA = ["bm128_bn256_bk64_g8_s3_w8", "bm256_bn128_bk64_g8_s3_w8", "bm128_bn128_bk64_g8_s4_w8",
         "bm128_bn128_bk64_g8_s3_w4", "bm128_bn128_bk128_g8_s3_w8", "bm64_bn256_bk64_g8_s4_w4",
         "bm256_bn64_bk64_g8_s4_w4", "bm128_bn256_bk32_g8_s4_w8", "bm64_bn128_bk128_g8_s3_w4",
         "bm128_bn128_bk32_g8_s4_w4", "bm128_bn64_bk128_g8_s3_w4", "bm64_bn64_bk128_g8_s3_w4"]


def workloads(dtype: torch.dtype) -> list[tuple[str, Callable[..., Any], list[torch.Tensor]]]:
    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=dtype) / 8

    def gemm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w

    def gelu_bias(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ w + b)

    def residual(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        return x @ w + b + res

    out = [("gemm 4096^3", gemm, [r(4096, 4096), r(4096, 4096)])]
    for m, n, k in ((4096, 4096, 4096), (8192, 3072, 768)):
        out.append((f"bias+gelu {m}x{n}x{k}", gelu_bias, [r(m, k), r(k, n), r(n)]))
    for m, n, k in ((8192, 768, 3072),):
        out.append((f"bias+residual {m}x{n}x{k}", residual, [r(m, k), r(k, n), r(n), r(m, n)]))
    return out


def main() -> None:
    dtype = getattr(torch, sys.argv[1]) if len(sys.argv) > 1 else torch.bfloat16
    names = {c.name for cs in CONFIGS.values() for c in cs if c.split_k == 1}
    names |= set(EXTRA)
    choices = ["extern", *sorted(names, key=lambda n: MatmulConfig.parse(n).block_m)]
    for label, fn, inputs in workloads(dtype):
        eager = do_bench(lambda: fn(*inputs))
        rows = []
        for choice in choices:
            torch._dynamo.reset()
            try:
                with forced_matmul(choice):
                    compiled = ef.compile(fn, backend="inductor")
                    compiled(*inputs)
                t = do_bench(lambda: compiled(*inputs))
                rows.append((t, choice))
            except Exception as e:  # noqa: BLE001 - a config that does not build is reported
                print(f"  {label} {choice}: failed: {type(e).__name__}: {str(e)[:120]}", flush=True)
        rows.sort()
        print(f"== {label} {dtype}: eager {eager * 1e3:.1f}us", flush=True)
        for t, choice in rows:
            print(f"   {choice:30s} {t * 1e3:8.1f}us  {eager / t:5.2f}x eager", flush=True)


if __name__ == "__main__":
    main()
