"""Convolution nets: conv2d/conv1d, batch norm in eval and train mode, pooling."""

from __future__ import annotations

import torch
from torch import nn

from corpus.case import case


def _randomize_bn(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            nn.init.uniform_(m.weight, 0.5, 1.5)
            nn.init.uniform_(m.bias, -0.5, 0.5)
    return model


def _convnet() -> nn.Module:
    return _randomize_bn(nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    ))


@case("convnet_bn_eval", lambda: (torch.randn(2, 3, 16, 16),))
def convnet_eval() -> nn.Module:
    return _convnet().eval()


@case("convnet_bn_train", lambda: (torch.randn(4, 3, 12, 12),))
def convnet_train() -> nn.Module:
    return _convnet().train()


class StridedGroups(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2)
        self.pool = nn.AvgPool2d(2, ceil_mode=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.conv(x))).flatten(1)


@case("conv_strided_groups_avgpool", lambda: (torch.randn(2, 4, 11, 11),))
def strided_groups() -> nn.Module:
    return StridedGroups().eval()


@case("conv1d_bn1d_train", lambda: (torch.randn(3, 4, 20),))
def conv1d_bn() -> nn.Module:
    return _randomize_bn(nn.Sequential(
        nn.Conv1d(4, 6, 5, padding=2), nn.BatchNorm1d(6), nn.Tanh(), nn.MaxPool1d(2)
    )).train()
