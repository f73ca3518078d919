"""Attention and a transformer block: matmul+softmax attention, SDPA, layer norm, GELU."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from corpus.case import case


def _attention_matmul(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    n = q.shape[-2]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


@case("attention_matmul_softmax",
      lambda: (torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8)))
def attention_matmul() -> object:
    return _attention_matmul


def _attention_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@case("attention_sdpa",
      lambda: (torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8)))
def attention_sdpa() -> object:
    return _attention_sdpa


class Block(nn.Module):
    """A pre-norm transformer block; attention through ``use_sdpa`` or matmul+softmax."""

    def __init__(self, d: int = 16, heads: int = 4, use_sdpa: bool = True) -> None:
        super().__init__()
        self.heads, self.use_sdpa = heads, use_sdpa
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.use_sdpa:
            a = F.scaled_dot_product_attention(q, k, v)
        else:
            a = torch.softmax(q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5, -1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


@case("transformer_block_sdpa", lambda: (torch.randn(2, 6, 16),))
def block_sdpa() -> nn.Module:
    return Block(use_sdpa=True).eval()


@case("transformer_block_matmul", lambda: (torch.randn(2, 6, 16),))
def block_matmul() -> nn.Module:
    return Block(use_sdpa=False).eval()
