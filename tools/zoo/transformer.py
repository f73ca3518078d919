"""A pre-norm transformer block and a small GPT decoder built from it (our own)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.registry import ModelAndInputs, build, pick, register, seeded_randn, seeded_tokens


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through ``F.scaled_dot_product_attention``."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out: torch.Tensor = self.proj(y.transpose(1, 2).reshape(b, s, d))
        return out


class TransformerBlock(nn.Module):
    """x + attn(ln(x)); x + mlp(ln(x))."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        mlp: torch.Tensor = self.out(F.gelu(self.fc(self.ln2(x))))
        return x + mlp


@register("transformer_block", "pre-norm block: SDPA attention + GELU MLP", tags=("attention",))
def make_transformer_block(device: torch.device, dtype: torch.dtype, suite: str) -> ModelAndInputs:
    batch, seq, width, heads = pick(
        suite, test=(2, 8, 32, 2), quick=(2, 64, 128, 4), full=(16, 1024, 1024, 16)
    )
    module = build(lambda: TransformerBlock(width, heads), device, dtype)
    return module, (seeded_randn(batch, seq, width, device=device, dtype=dtype, seed=20),)


class TinyGPT(nn.Module):
    """Token + learned position embeddings, N blocks, final norm, tied LM head."""

    def __init__(self, vocab: int, context: int, width: int, heads: int, layers: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(TransformerBlock(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tok(ids) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        normed: torch.Tensor = self.ln(x)
        return normed @ self.tok.weight.t()


@register("gpt", "small GPT decoder (embeddings, blocks, tied LM head)", tags=("attention",))
def make_gpt(device: torch.device, dtype: torch.dtype, suite: str) -> ModelAndInputs:
    batch, seq, vocab, width, heads, layers = pick(
        suite, test=(2, 8, 100, 32, 2, 2), quick=(2, 64, 1000, 128, 4, 2),
        full=(16, 1024, 32000, 768, 12, 12),
    )
    module = build(lambda: TinyGPT(vocab, seq, width, heads, layers), device, dtype)
    return module, (seeded_tokens(batch, seq, vocab=vocab, device=device, seed=21),)
