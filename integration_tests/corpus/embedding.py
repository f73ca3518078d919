"""Embeddings: token + position embedding with layer norm; padding index."""

from __future__ import annotations

import torch
from torch import nn

from corpus.case import case


class TokenEmbedding(nn.Module):
    def __init__(self, vocab: int = 50, d: int = 16, max_len: int = 12) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.ln = nn.LayerNorm(d)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        return self.ln(self.tok(ids) + self.pos(pos))


@case("embedding_token_position", lambda: (torch.randint(0, 50, (2, 9)),))
def token_embedding() -> nn.Module:
    return TokenEmbedding().eval()


class PaddedBag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 6, padding_idx=0)

    def forward(self, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return (self.emb(ids) * weights.unsqueeze(-1)).sum(1)


@case("embedding_padding_weighted_sum",
      lambda: (torch.randint(0, 20, (3, 5)), torch.rand(3, 5) + 0.1))
def padded_bag() -> nn.Module:
    return PaddedBag().eval()
