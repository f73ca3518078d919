"""A ResNet-style convolutional network (our own, small)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.registry import ModelAndInputs, build, pick, register, seeded_randn


class BasicBlock(nn.Module):
    """conv-bn-relu-conv-bn plus a (projected when the shape changes) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class SmallResNet(nn.Module):
    """Stem, three stages of two BasicBlocks, global average pool, classifier."""

    def __init__(self, widths: tuple[int, int, int], classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, padding=1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        blocks = []
        cin = widths[0]
        for i, w in enumerate(widths):
            blocks += [BasicBlock(cin, w, stride=1 if i == 0 else 2), BasicBlock(w, w, 1)]
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)
        # Non-trivial running statistics so eval-mode batch norm is not an identity.
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    assert m.running_mean is not None and m.running_var is not None
                    m.running_mean.normal_(0.0, 0.1)
                    m.running_var.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        logits: torch.Tensor = self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
        return logits


@register("resnet", "ResNet-style conv net (3 stages of BasicBlocks)", tags=("conv",))
def make_resnet(device: torch.device, dtype: torch.dtype, suite: str) -> ModelAndInputs:
    batch, size, widths = pick(
        suite, test=(2, 16, (8, 16, 32)), quick=(8, 32, (32, 64, 128)),
        full=(128, 128, (64, 128, 256)),
    )
    module = build(lambda: SmallResNet(widths), device, dtype)
    return module, (seeded_randn(batch, 3, size, size, device=device, dtype=dtype, seed=10),)
