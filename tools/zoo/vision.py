"""torchvision ResNet-18 (untrained), registered only when torchvision is installed."""

from __future__ import annotations

import importlib.util

import torch

from zoo.registry import ModelAndInputs, build, pick, register, seeded_randn

if importlib.util.find_spec("torchvision") is not None:

    @register("tv_resnet18", "torchvision ResNet-18, untrained", tags=("conv",))
    def make_tv_resnet18(device: torch.device, dtype: torch.dtype, suite: str) -> ModelAndInputs:
        import torchvision

        batch, size = pick(suite, test=(1, 32), quick=(4, 64), full=(256, 224))
        module = build(lambda: torchvision.models.resnet18(weights=None), device, dtype)
        return module, (seeded_randn(batch, 3, size, size, device=device, dtype=dtype, seed=40),)
