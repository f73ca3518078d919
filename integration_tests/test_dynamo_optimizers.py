"""``torch.compile(optimizer.step, backend="ember")``: Dynamo writes ``addcmul_`` (Adam,
RMSprop, Adagrad without ``foreach``) as ``prims.fma``, which Ember decomposes
(``aot/decompositions.fma``); the compiled steps match eager's over several steps."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
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
