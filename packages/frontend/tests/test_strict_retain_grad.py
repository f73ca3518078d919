"""``Tensor.retain_grad()`` on a tensor of the graph: the real tensor keeps its
gradient after ``backward()``, as in eager (a graph break: run on the fake tensor the
call was lost, and ``.grad`` stayed None)."""

from __future__ import annotations

import torch
from strict_helpers import strict
from torch import nn


def _activations(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    hidden = x * 2
    hidden.retain_grad()
    return hidden.sin().sum(), hidden


def test_a_returned_intermediate_keeps_its_gradient() -> None:
    compiled = strict(_activations)
    for i in range(2):
        x = torch.arange(3.0, requires_grad=True) + 0.0
        x.retain_grad()
        loss, hidden = compiled(x)
        assert hidden.retains_grad
        loss.backward()
        assert hidden.grad is not None
        torch.testing.assert_close(hidden.grad, (x.detach() * 2).cos())
    assert compiled.stats.graph_breaks >= 1


class _Probe(nn.Module):
    """Keeps its last activation with its gradient (a saliency/inspection pattern)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.act: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = self.lin(x)
        act.retain_grad()
        self.act = act
        return act.relu().sum()


def test_an_activation_stored_on_the_module_keeps_its_gradient() -> None:
    torch.manual_seed(0)
    model = _Probe()
    compiled = strict(model)
    for i in range(2):
        x = torch.randn(2, 3)
        compiled(x).backward()
        got = model.act
        model(x).backward()
        expected = model.act
        assert got is not None and expected is not None and got.grad is not None
        torch.testing.assert_close(got.grad, expected.grad)
