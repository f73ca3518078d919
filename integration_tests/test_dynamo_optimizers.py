"""``torch.compile(optimizer.step, backend="ember")``: Dynamo writes ``addcmul_`` (Adam,
RMSprop, Adagrad without ``foreach``) as ``prims.fma``, which Ember decomposes
(``aot/decompositions.fma``); the compiled steps match eager's over several steps."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from ember.runtime import dynamo_backend
from ember.runtime.config import patch
from torch import nn

OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=False),
    "adamw_amsgrad": lambda ps: torch.optim.AdamW(ps, lr=0.01, amsgrad=True, foreach=False),
    "rmsprop_centered": lambda ps: torch.optim.RMSprop(ps, lr=0.01, centered=True,
                                                       momentum=0.9, foreach=False),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1, foreach=False),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_compiled_step_matches_eager(name: str) -> None:
    torch.compiler.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 2))
    reference = copy.deepcopy(model)
    opt, ref_opt = OPTIMIZERS[name](model.parameters()), OPTIMIZERS[name](reference.parameters())
    step = torch.compile(opt.step, backend="ember")
    for i in range(3):
        x = torch.randn(4, 6)
        for m, o in ((model, opt), (reference, ref_opt)):
            o.zero_grad()
            m(x).square().sum().backward()
        step()
        ref_opt.step()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=f"step {i}")


def test_a_learning_rate_a_scheduler_changes_compiles_again_for_each_value() -> None:
    # Dynamo passes the learning rate as a tensor once it changed (a float attribute);
    # Ember bakes it into the program and raised "compile with dynamic=None or False"
    # at the third step
    torch.compiler.reset()
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    reference = copy.deepcopy(model)
    runs = []
    for m in (model, reference):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        runs.append((m, opt, torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)))

    def step(m: nn.Module, opt: torch.optim.Optimizer, sched: Any, x: torch.Tensor) -> None:
        opt.zero_grad()
        m(x).square().sum().backward()
        opt.step()
        sched.step()

    compiled = torch.compile(step, backend="ember")
    for _ in range(5):
        x = torch.randn(3, 4)
        compiled(*runs[0], x)
        step(*runs[1], x)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)


def test_past_the_limit_of_learning_rates_the_step_runs_eagerly() -> None:
    torch.compiler.reset()
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    reference = copy.deepcopy(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]

    def step(m: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
        opt.zero_grad()
        m(x).square().sum().backward()
        opt.step()

    compiled = torch.compile(step, backend="ember")
    before = sum(dynamo_backend.eager_graphs.values())
    with patch(recompile_limit=3), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(7):
            x = torch.randn(3, 4)
            for o in opts:
                o.param_groups[0]["lr"] = 0.1 / (i + 1)
            compiled(model, opts[0], x)
            step(reference, opts[1], x)
    assert sum(dynamo_backend.eager_graphs.values()) > before
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)

