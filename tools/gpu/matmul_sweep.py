"""Time every matmul template config against cuBLAS on the issue-16 shapes (H200 tuning).

    python tools/gpu/matmul_sweep.py [dtype] [all|tma|pointer] > $OUT/matmul_sweep.txt
    # on the GPU machine: SWEEP_ARGS="bfloat16 tma" bash tools/gpu/h200_all.sh sweep

Each workload is compiled once per choice (``forced_matmul``: the extern, or one config
of the template) and timed with ``triton.testing.do_bench`` beside eager; the table says
which choice wins per shape, the data behind ``matmul_configs.CONFIGS`` /
``TMA_CONFIGS`` and the default heuristic. The second argument picks the choices: ``all``
(default), ``tma`` (the extern, the pointer table's first config and every TMA config:
the persistent TMA variant of ``matmul_tma_template``, Hopper only) or ``pointer`` (the
extern and the pointer template's configs). A row whose generated code is not the TMA
variant although its config is (a fallback) is marked ``(fell back)``.
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
from ember.inductor.codegen.triton.matmul_configs import (
    CONFIGS,
    TMA_CONFIGS,
    MatmulConfig,
    dtype_class,
)
from ember.runtime import phases

EXTRA = ["bm128_bn256_bk64_g8_s3_w8", "bm256_bn128_bk64_g8_s3_w8", "bm128_bn128_bk64_g8_s4_w8",
         "bm128_bn128_bk64_g8_s3_w4", "bm128_bn128_bk128_g8_s3_w8", "bm64_bn256_bk64_g8_s4_w4",
         "bm256_bn64_bk64_g8_s4_w4", "bm128_bn256_bk32_g8_s4_w8", "bm64_bn128_bk128_g8_s3_w4",
         "bm128_bn128_bk32_g8_s4_w4", "bm128_bn64_bk128_g8_s3_w4", "bm64_bn64_bk128_g8_s3_w4"]
#: TMA variant configs timed beside TMA_CONFIGS (shared memory: 128x256x64 takes 48 KiB a
#: stage, so 4 stages may not fit; such a row reports its failure)
TMA_EXTRA = ["tma_bm128_bn256_bk64_g8_s4_w8", "tma_bm128_bn128_bk128_g8_s3_w8",
             "tma_bm64_bn256_bk64_g8_s4_w4", "tma_bm128_bn256_bk32_g8_s4_w8",
             "tma_bm128_bn256_bk64_g16_s3_w8"]


def workloads(dtype: torch.dtype) -> list[tuple[str, Callable[..., Any], list[torch.Tensor]]]:
    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=dtype) / 8

    def gemm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w

    def gelu_bias(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ w + b)

    def residual(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        return x @ w + b + res

    def linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.gelu(F.linear(x, w, b))  # w [N, K]: the MLP's fc1, a transposed B

    def linear_residual(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
                        res: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w, b) + res  # the MLP's fc2

    out = [("gemm 4096^3", gemm, [r(4096, 4096), r(4096, 4096)])]
    for m, n, k in ((4096, 4096, 4096), (8192, 3072, 768)):
        out.append((f"bias+gelu {m}x{n}x{k}", gelu_bias, [r(m, k), r(k, n), r(n)]))
    for m, n, k in ((8192, 768, 3072),):
        out.append((f"bias+residual {m}x{n}x{k}", residual, [r(m, k), r(k, n), r(n), r(m, n)]))
    out.append(("linear+gelu 8192x3072x768", linear_gelu, [r(8192, 768), r(3072, 768), r(3072)]))
    out.append(("linear+residual 8192x768x3072", linear_residual,
                [r(8192, 3072), r(768, 3072), r(768), r(8192, 768)]))
    return out


def choices(which: str, dtype: torch.dtype) -> list[str]:
    """The extern and the template configs ``which`` names (module doc); the TMA configs
    of ``dtype``'s large class (every workload here is large)."""
    pointer = {c.name for cs in CONFIGS.values() for c in cs if c.split_k == 1} | set(EXTRA)
    tma = {c.name for c in TMA_CONFIGS[(dtype_class(dtype), "large")]} | set(TMA_EXTRA)
    picked = {"all": pointer | tma, "pointer": pointer,
              "tma": tma | {CONFIGS[("16-bit", "large")][0].name}}
    if which not in picked:
        raise SystemExit(f"matmul_sweep: choices are all, tma or pointer, not {which!r}")
    return ["extern", *sorted(picked[which], key=lambda n: (MatmulConfig.parse(n).block_m, n))]


def main() -> None:
    dtype = getattr(torch, sys.argv[1]) if len(sys.argv) > 1 else torch.bfloat16
    timed = choices(sys.argv[2] if len(sys.argv) > 2 else "all", dtype)
    print(f"device {torch.cuda.get_device_name()} sm_{''.join(map(str, torch.cuda.get_device_capability()))}, "
          f"{len(timed)} choices", flush=True)
    for label, fn, inputs in workloads(dtype):
        eager = do_bench(lambda: fn(*inputs))
        rows = []
        for choice in timed:
            torch._dynamo.reset()
            try:
                with forced_matmul(choice):
                    compiled = ef.compile(fn, backend="inductor")
                    compiled(*inputs)
                profile = phases.last_compile_profile()
                fell_back = profile is not None and profile.counts.get("matmul TMA fallbacks")
                t = do_bench(lambda: compiled(*inputs))
                rows.append((t, choice + (" (fell back)" if fell_back else "")))
            except Exception as e:  # noqa: BLE001 - a config that does not build is reported
                print(f"  {label} {choice}: failed: {type(e).__name__}: {str(e)[:120]}", flush=True)
        rows.sort()
        print(f"== {label} {dtype}: eager {eager * 1e3:.1f}us", flush=True)
        for t, choice in rows:
            print(f"   {choice:44s} {t * 1e3:8.1f}us  {eager / t:5.2f}x eager", flush=True)


if __name__ == "__main__":
    main()
