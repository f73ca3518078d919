"""A module hook registered (or removed) by the compiled code itself, before the module
is called in the same forward: the call runs the hooks as they are then, as in eager
(the change reached the module only after the graph, so the first call ran without the
new hook)."""

from __future__ import annotations

from typing import Any

import torch
from strict_helpers import strict
from torch import nn


class _RegistersOnce(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(2, 2)
        self.handle: Any = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.handle is None:
            self.handle = self.lin.register_forward_hook(lambda m, i, out: out * 0 + 3)
        return self.lin(x)


class _RemovesOnce(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(2, 2)
        self.handle: Any = self.lin.register_forward_pre_hook(lambda m, args: (args[0] * 0,))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.handle is not None:
            self.handle.remove()
            self.handle = None
        return self.lin(x)


def _compare(make: Any) -> None:
    model, reference = make(), make()
    compiled = strict(model)
    x = torch.ones(1, 2)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), reference(x))
    assert len(model.lin._forward_hooks) == len(reference.lin._forward_hooks)
    assert len(model.lin._forward_pre_hooks) == len(reference.lin._forward_pre_hooks)


def test_a_hook_registered_before_the_call() -> None:
    _compare(_RegistersOnce)


def test_a_hook_removed_before_the_call() -> None:
    _compare(_RemovesOnce)
