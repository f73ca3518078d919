"""Tile configurations of the Triton matmul template, by dtype and shape class.

A configuration is named by its fields (``bm128_bn128_bk64_g8_s3_w8``; split-K adds
``_k4``; the persistent TMA variant of :mod:`.matmul_tma` is prefixed ``tma_``); the
name is what the lowering records in the kernel
(:class:`~ember.inductor.loop_ir.MatmulTemplate` ``config``) and what the autotuner
caches. The table lists, per dtype class and shape class, the candidates the autotuner
times; the heuristic (:mod:`.matmul_choice`) picks the first of its class that launches
enough programs to fill the GPU.

=========  ===========  ==============================================================
dtype      shape class  configs (BLOCK_M x BLOCK_N x BLOCK_K, stages, warps)
=========  ===========  ==============================================================
16-bit     large        128x256x64 s3 w8, 128x128x64 s3 w4, 64x128x64 s4 w4, 128x128x64 s3 w8
16-bit     small        64x64x32 s5 w4, 32x64x32 s5 w4, 64x32x32 s5 w4, 32x32x32 s4 w4
16-bit     skinny       64x64x64 s3 w4 split 4, 64x64x64 s3 w4 split 8, 32x32x64 s3 w4 split 16
float32    large        128x128x32 s3 w8, 64x128x32 s4 w4, 128x64x32 s4 w4
float32    small        64x64x32 s4 w4, 32x32x32 s4 w4
float32    skinny       64x64x32 s3 w4 split 4, 32x32x32 s3 w4 split 8
=========  ===========  ==============================================================

The TMA variant (Hopper, :mod:`.matmul_tma`) has its own table, ``TMA_CONFIGS``, by the
same classes (no skinny class: split-K stays the pointer template's):

=========  ===========  ==============================================================
dtype      shape class  TMA configs
=========  ===========  ==============================================================
16-bit     large        128x256x64 s3 w8, 128x128x64 s4 w8, 128x128x64 s3 w4, 256x128x64 s3 w8
16-bit     small        64x128x64 s4 w4, 64x64x64 s4 w4
float32    large        128x128x32 s3 w8, 128x64x32 s4 w4
float32    small        64x64x32 s4 w4
=========  ===========  ==============================================================

Shape classes (at the sizes' hints): *skinny* when ``M * N`` is at most
``SKINNY_MN`` and ``K >= 8 * max(M, N)`` (few output tiles, a long reduction: the
split-K form reduces chunks of K in parallel into a float32 workspace and a second
function sums them and runs the epilogue); *small* when ``M`` or ``N`` is below 128;
else *large*.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

#: ``M * N`` at most this (and ``K >= 8 * max(M, N)``): the skinny class, split-K
SKINNY_MN = 128 * 128
#: ``M`` or ``N`` below this: the small class
SMALL_SIDE = 128

_NAME = re.compile(r"(tma_)?bm(\d+)_bn(\d+)_bk(\d+)_g(\d+)_s(\d+)_w(\d+)(?:_k(\d+))?$")


@dataclass(frozen=True)
class MatmulConfig:
    """One tiling of the template: a ``block_m x block_n`` output tile per program,
    ``block_k`` per step of the reduction, ``group_m`` row tiles per swizzle group,
    ``num_stages`` software-pipeline stages, ``num_warps``, ``split_k`` chunks of the
    reduction reduced in parallel (1: none), and ``tma``: the persistent TMA variant
    (:mod:`.matmul_tma_template`; never with split-K)."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_stages: int = 3
    num_warps: int = 4
    split_k: int = 1
    tma: bool = False

    @property
    def name(self) -> str:
        name = (("tma_" if self.tma else "")
                + f"bm{self.block_m}_bn{self.block_n}_bk{self.block_k}_g{self.group_m}"
                + f"_s{self.num_stages}_w{self.num_warps}")
        return name + (f"_k{self.split_k}" if self.split_k > 1 else "")

    @classmethod
    def parse(cls, name: str) -> MatmulConfig:
        """The config named ``name`` (:attr:`name`'s form).

        Raises:
            ValueError: ``name`` is not a config name.
        """
        found = _NAME.match(name)
        if found is None:
            raise ValueError(f"not a matmul template config name: {name!r} "
                             "(expected e.g. 'bm64_bn64_bk32_g8_s4_w4' or '..._k4')")
        tma, bm, bn, bk, g, s, w, k = found.groups()
        if tma and k:
            raise ValueError(f"not a matmul template config name: {name!r} (the TMA "
                             "variant has no split-K form)")
        return cls(int(bm), int(bn), int(bk), int(g), int(s), int(w), int(k or 1),
                   tma=bool(tma))


def _c(bm: int, bn: int, bk: int, s: int, w: int, k: int = 1) -> MatmulConfig:
    return MatmulConfig(bm, bn, bk, 8, s, w, k)


#: (dtype class, shape class) -> candidate configs, the heuristic's first
CONFIGS: dict[tuple[str, str], tuple[MatmulConfig, ...]] = {
    # H200 sweep (tools/gpu/matmul_sweep.py, bf16): 128x256 s3 w8 was fastest or within
    # 4% on every 16-bit large shape (GEMM 4096^3, bias+GELU 4096^3 and 8192x3072x768,
    # bias+residual 8192x768x3072); 128x128 s3 w4 the best second; 128x64 never close
    ("16-bit", "large"): (_c(128, 256, 64, 3, 8), _c(128, 128, 64, 3, 4),
                          _c(64, 128, 64, 4, 4), _c(128, 128, 64, 3, 8)),
    ("16-bit", "small"): (_c(64, 64, 32, 5, 4), _c(32, 64, 32, 5, 4),
                          _c(64, 32, 32, 5, 4), _c(32, 32, 32, 4, 4)),
    ("16-bit", "skinny"): (_c(64, 64, 64, 3, 4, 4), _c(64, 64, 64, 3, 4, 8),
                           _c(32, 32, 64, 3, 4, 16)),
    ("float32", "large"): (_c(128, 128, 32, 3, 8), _c(64, 128, 32, 4, 4),
                           _c(128, 64, 32, 4, 4)),
    ("float32", "small"): (_c(64, 64, 32, 4, 4), _c(32, 32, 32, 4, 4)),
    ("float32", "skinny"): (_c(64, 64, 32, 3, 4, 4), _c(32, 32, 32, 3, 4, 8)),
}


def _t(bm: int, bn: int, bk: int, s: int, w: int) -> MatmulConfig:
    return MatmulConfig(bm, bn, bk, 8, s, w, tma=True)


#: (dtype class, shape class) -> the TMA variant's candidate configs (module doc), the
#: heuristic's first; float32 rows run as TF32 (the variant needs TF32 allowed)
TMA_CONFIGS: dict[tuple[str, str], tuple[MatmulConfig, ...]] = {
    # 128x256x64 s3 w8: the pointer template's best on every 16-bit large shape of the
    # H200 sweep, and the tile Hopper's wgmma fills best; the others are the sweep's
    # (tools/gpu/matmul_sweep.py) alternatives
    ("16-bit", "large"): (_t(128, 256, 64, 3, 8), _t(128, 128, 64, 4, 8),
                          _t(128, 128, 64, 3, 4), _t(256, 128, 64, 3, 8)),
    ("16-bit", "small"): (_t(64, 128, 64, 4, 4), _t(64, 64, 64, 4, 4)),
    ("float32", "large"): (_t(128, 128, 32, 3, 8), _t(128, 64, 32, 4, 4)),
    ("float32", "small"): (_t(64, 64, 32, 4, 4),),
}


def dtype_class(dtype: torch.dtype) -> str:
    """``16-bit`` (float16, bfloat16) or ``float32``.

    Raises:
        ValueError: a dtype the template does not take.
    """
    if dtype in (torch.float16, torch.bfloat16):
        return "16-bit"
    if dtype == torch.float32:
        return "float32"
    raise ValueError(f"the matmul template takes float16, bfloat16 and float32, not {dtype}")


def shape_class(m: int, n: int, k: int, batched: bool) -> str:
    """``skinny``, ``small`` or ``large`` (module doc); batched matmuls are never skinny
    (split-K is written for one matrix)."""
    if not batched and m * n <= SKINNY_MN and k >= 8 * max(m, n):
        return "skinny"
    if min(m, n) < SMALL_SIDE:
        return "small"
    return "large"


def candidate_configs(dtype: torch.dtype, m: int, n: int, k: int,
                      batched: bool) -> tuple[MatmulConfig, ...]:
    """The configs of the class of these sizes (hints), the heuristic's first."""
    return CONFIGS[(dtype_class(dtype), shape_class(m, n, k, batched))]


__all__ = [
    "CONFIGS",
    "SKINNY_MN",
    "SMALL_SIDE",
    "TMA_CONFIGS",
    "MatmulConfig",
    "candidate_configs",
    "dtype_class",
    "shape_class",
]
