"""Fresh 0-d buffers of one dtype come from one allocation in the generated wrapper (an
AdamW step's per-parameter bias corrections: one ``_empty(...).unbind()``, not one
call each), 16 bytes apart, and the step still matches eager's."""

from __future__ import annotations

import re

import ember.frontend as ef
import pytest
import torch
from ember.runtime.config import patch
from torch import nn


def _optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(8, 8) for _ in range(3)))
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    opt.step()
    return model, opt


def test_an_optimizer_steps_scalars_share_one_allocation(capsys: pytest.CaptureFixture[str]) -> None:
    eager_model, eager_opt = _optimizer()
    model, opt = _optimizer()
    step = ef.compile(opt.step)
    with patch(logs=frozenset({"output_code"}), program_cache=False, capture_cache=False):
        step()
    wrapper = capsys.readouterr().err
    grouped = re.findall(r"= _empty\(\((\d+),\), \((\d+),\), torch.float32\)\.unbind\(\)", wrapper)
    assert grouped, "no grouped 0-d allocation in the wrapper"
    # 6 parameters: two bias corrections each, float32 slots 4 elements (16 bytes) apart
    assert sum(int(n) for n, _ in grouped) >= 12 and {s for _, s in grouped} == {"4"}
    assert "_empty((), ()" not in wrapper
    eager_opt.step()
    for _ in range(2):
        step()
        eager_opt.step()
    for p, q in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(p, q)
