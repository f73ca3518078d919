"""Random ops: recorded as ops, so a run after ``torch.manual_seed`` reproduces eager."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from corpus.case import case


def _rand_like(x: torch.Tensor) -> torch.Tensor:
    return x + torch.rand_like(x) + torch.randn(x.shape[-1])


@case("random_rand_like_randn", lambda: (torch.randn(3, 5),), random=True)
def rand_like() -> object:
    return _rand_like


def _dropout_bernoulli(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return F.dropout(x, 0.4, training=True), torch.bernoulli(torch.sigmoid(x))


@case("random_dropout_bernoulli", lambda: (torch.randn(16, 8),), random=True)
def dropout_bernoulli() -> object:
    return _dropout_bernoulli
