"""Multi-layer perceptrons: modules and plain functions."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from corpus.case import case


@case("mlp_relu", lambda: (torch.randn(4, 16),))
def mlp_relu() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()


@case("mlp_gelu_layernorm", lambda: (torch.randn(2, 5, 16),))
def mlp_gelu_layernorm() -> nn.Module:
    return nn.Sequential(
        nn.Linear(16, 64), nn.GELU(approximate="tanh"), nn.LayerNorm(64), nn.Linear(64, 16)
    ).eval()


def _mlp_function(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor,
                  w2: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w1 + b1) @ w2


@case("mlp_function_weights_as_args",
      lambda: (torch.randn(8, 6), torch.randn(6, 12), torch.randn(12), torch.randn(12, 3)))
def mlp_function() -> object:
    return _mlp_function


class ResidualMLP(nn.Module):
    def __init__(self, d: int = 12) -> None:
        super().__init__()
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.silu(self.up(x))) * torch.sigmoid(x)


@case("mlp_residual_silu", lambda: (torch.randn(3, 12),))
def residual_mlp() -> nn.Module:
    return ResidualMLP().eval()


@case("mlp_dropout_train", lambda: (torch.randn(6, 10),), random=True)
def mlp_dropout_train() -> nn.Module:
    return nn.Sequential(nn.Linear(10, 20), nn.Dropout(0.3), nn.ReLU(), nn.Linear(20, 4)).train()
