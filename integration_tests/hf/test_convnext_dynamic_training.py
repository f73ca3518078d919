"""ConvNeXt training with symbolic image sizes and a static batch (the inductor on the
CPU): the loss was NaN. The loss's reduction kernel, fused with the pooler LayerNorm's
statistics, stored a statistic in the memory of the log-sum-exp it read, and the store
did not depend on that read: with every C++ pointer ``__restrict__`` the compiler may
move it first. In-place stores now wait for the value they replace
(``memory_plan._reads``)."""

from __future__ import annotations

import copy

import ember.frontend as ef
import pytest
import torch

transformers = pytest.importorskip("transformers")


def test_convnext_training_loss_with_symbolic_image_sizes() -> None:
    config = transformers.ConvNextConfig(num_channels=3, hidden_sizes=[8, 16, 32, 64],
                                         depths=[1, 1, 1, 1], num_labels=2)
    torch.manual_seed(0)
    model = transformers.ConvNextForImageClassification(config).train()
    twin = copy.deepcopy(model)
    compiled = ef.compile(twin, dynamic=True)
    for size in (40, 48):
        x, labels = torch.randn(2, 3, size, size), torch.tensor([1, 1])
        ef.mark_static(x, 0)
        ef.mark_static(labels, 0)
        want = model(pixel_values=x, labels=labels).loss
        got = compiled(pixel_values=x, labels=labels).loss
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
