"""``ef.compile(opt.step)`` with ``lr=torch.tensor(...)`` for the optimizers that pass the
lr as an op's Scalar (``p.add_(g, alpha=-lr)``: SGD, RMSprop, Adagrad, Adadelta, Adamax,
Rprop). The whole step was a graph break ("got a symbolic value zuf0 (SymFloat)") and ran
eagerly; it is now one graph that reads the lr tensor, so a scheduler's change is
followed with no recompile."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator

import ember.frontend as ef
import pytest
import torch
from torch import nn

Make = Callable[[Iterator[nn.Parameter]], torch.optim.Optimizer]

OPTIMIZERS: dict[str, Make] = {
    "SGD": lambda p: torch.optim.SGD(p, lr=torch.tensor(0.1)),
    "SGD-momentum": lambda p: torch.optim.SGD(p, lr=torch.tensor(0.1), momentum=0.9),
    "RMSprop": lambda p: torch.optim.RMSprop(p, lr=torch.tensor(0.01), foreach=False),
    "Adagrad": lambda p: torch.optim.Adagrad(p, lr=torch.tensor(0.1), foreach=False),
    "Rprop": lambda p: torch.optim.Rprop(p, lr=torch.tensor(0.01), foreach=False),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_tensor_lr_step_is_one_graph_that_follows_the_scheduler(name: str) -> None:
    torch.manual_seed(0)
    eager_model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    ember_model = copy.deepcopy(eager_model)
    eager_opt = OPTIMIZERS[name](eager_model.parameters())
    ember_opt = OPTIMIZERS[name](ember_model.parameters())
    schedulers = [torch.optim.lr_scheduler.ExponentialLR(o, 0.5) for o in (eager_opt, ember_opt)]
    step = ef.compile(ember_opt.step, backend="aot_eager")
    for i in range(4):
        x = torch.randn(5, 4)
        for model in (eager_model, ember_model):
            model(x).pow(2).sum().backward()
        eager_opt.step()
        step()
        for opt, scheduler in zip((eager_opt, ember_opt), schedulers):
            opt.zero_grad()
            scheduler.step()
        for p, q in zip(ember_model.parameters(), eager_model.parameters()):
            torch.testing.assert_close(p, q)
    assert step.stats.graph_breaks == 0
    assert step.stats.eager_fallback_calls == 0
    # the first step makes the state, the later ones reuse the second entry
    assert step.stats.compiles <= 2
