"""A module class that defines its own ``__call__`` (calling ``super().__call__``): calling
the module runs it, as in eager and under torch.compile. Before, Ember went straight to
the hooks and ``forward``: a submodule called with the override's extra arguments raised
``TypeError`` (they reached ``forward``), and a compiled root skipped the override
(silently wrong)."""

from __future__ import annotations

import torch
from strict_helpers import strict
from torch import nn


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def __call__(self, x, scale=2.0):
        return super().__call__(x) * scale

    def forward(self, x):
        return self.lin(x)


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Scaled()

    def forward(self, x):
        return self.inner(x, scale=3.0)


def test_custom_call_runs() -> None:
    x = torch.randn(2, 3)
    for make in (Outer, Scaled):
        torch.manual_seed(0)
        model = make()
        compiled = strict(model)
        for _ in range(2):
            torch.testing.assert_close(compiled(x), model(x))
        assert compiled.stats.graphs == 1 and compiled.stats.graph_breaks == 0


def test_hooks_of_a_custom_call_root_run_once() -> None:
    torch.manual_seed(0)
    model = Scaled()
    calls = []
    model.register_forward_hook(lambda m, i, o: calls.append(1))
    compiled = strict(model)
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), model(x))
    assert len(calls) == 2  # one eager call, one compiled
