"""Single-concept models: a pointwise chain, normalizations, an MLP block, attention."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from zoo.registry import ModelAndInputs, build, pick, register, seeded_randn


class PointwiseChain(nn.Module):
    """Ten elementwise ops on two inputs: one fused kernel for a good compiler, ten
    memory round trips in eager."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = torch.sigmoid(x) * x
        b = torch.tanh(y) * 0.5 + 1.0
        c = a * b - torch.abs(y)
        return torch.relu(c) + torch.exp(-x * x) / (1.0 + b)


@register("pointwise", "10 elementwise ops on two tensors", tags=("memory-bound",))
def make_pointwise(device: torch.device, dtype: torch.dtype, suite: str) -> ModelAndInputs:
    n = pick(suite, test=1 << 12, quick=1 << 20, full=1 << 28)
    module = build(PointwiseChain, device, dtype)
    x = seeded_randn(n, device=device, dtype=dtype, seed=1)
    y = seeded_randn(n, device=device, dtype=dtype, seed=2)
    return module, (x, y)


class SoftmaxLayerNorm(nn.Module):
    """softmax over the last dim followed by a layer_norm with affine weights."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.1)
            self.norm.bias.normal_(0.0, 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.norm(torch.softmax(x * 2.0, dim=-1))
        return out


def _rows_cols(suite: str) -> tuple[int, int]:
    return pick(suite, test=(16, 64), quick=(512, 1024), full=(32768, 4096))


@register("softmax_layernorm", "softmax then layer_norm over rows", tags=("reduction",))
def make_softmax_layernorm(device: torch.device, dtype: torch.dtype, suite: str) -> ModelAndInputs:
    rows, cols = _rows_cols(suite)
    module = build(lambda: SoftmaxLayerNorm(cols), device, dtype)
    return module, (seeded_randn(rows, cols, device=device, dtype=dtype, seed=3),)


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight, written out (no fused op)."""

    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(dim=-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype) * self.weight


@register("rms_norm", "RMSNorm written with pointwise ops and a mean", tags=("reduction",))
def make_rms_norm(device: torch.device, dtype: torch.dtype, suite: str) -> ModelAndInputs:
    rows, cols = _rows_cols(suite)
    module = build(lambda: RMSNorm(cols), device, dtype)
    return module, (seeded_randn(rows, cols, device=device, dtype=dtype, seed=4),)


class MLPBlock(nn.Module):
    """Linear -> GELU (tanh) -> Linear with a residual: matmuls with pointwise epilogues."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden: torch.Tensor = self.up(x)
        out: torch.Tensor = self.down(F.gelu(hidden, approximate="tanh"))
        return x + out


@register("mlp", "Linear-GELU-Linear block with a residual", tags=("matmul",))
def make_mlp(device: torch.device, dtype: torch.dtype, suite: str) -> ModelAndInputs:
    tokens, width = pick(suite, test=(8, 32), quick=(256, 256), full=(16384, 4096))
    module = build(lambda: MLPBlock(width), device, dtype)
    return module, (seeded_randn(tokens, width, device=device, dtype=dtype, seed=5),)


class NaiveAttention(nn.Module):
    """Causal attention written out: q k^T, mask, softmax, @ v (no SDPA)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        seq = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


@register("naive_attention", "causal attention without SDPA", tags=("attention",))
def make_naive_attention(device: torch.device, dtype: torch.dtype, suite: str) -> ModelAndInputs:
    b, h, s, d = pick(suite, test=(1, 2, 16, 8), quick=(2, 4, 128, 32), full=(8, 16, 2048, 64))
    module = build(NaiveAttention, device, dtype)
    q, k, v = (seeded_randn(b, h, s, d, device=device, dtype=dtype, seed=6 + i) for i in range(3))
    return module, (q, k, v)
