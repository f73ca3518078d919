"""A segment whose inputs include a tensor with autograd history (a loss kept across
``loss.backward()``, the break that splits a training step) and that then updates
parameters under ``torch.no_grad()`` (an optimizer step) is one graph.

Making such an input's fake runs ops with grad mode on (its fake ``grad_fn``); the grad
mode tracker counted them as the program's ops, so the segment was taken to run with grad
mode on and each parameter update became a graph break."""

from __future__ import annotations

import copy

import ember.frontend as ef
import pytest
import torch
from torch import nn


def train_step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    loss = model(x).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.sub_(0.1 * p.grad)
    return loss


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_updates_after_backward_with_the_loss_live_are_one_graph(backend: str) -> None:
    torch.manual_seed(0)
    eager_model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    ember_model = copy.deepcopy(eager_model)
    compiled = ef.compile(train_step, backend=backend)
    for step in range(3):
        x = torch.randn(5, 4)
        expected = train_step(eager_model, x)
        got = compiled(ember_model, x)
        torch.testing.assert_close(got, expected)
        assert got.requires_grad
        for p, q in zip(ember_model.parameters(), eager_model.parameters()):
            torch.testing.assert_close(p, q)
            p.grad = None
            q.grad = None
    explained = ef.explain(train_step)(copy.deepcopy(eager_model), torch.randn(5, 4))
    assert explained.break_count == 1, explained  # backward() alone
    assert compiled.stats.graph_breaks == 1
