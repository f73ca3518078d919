"""Autocast's weight-cast cache under ``no_grad`` (bytecode/grad_mode.py,
``program_call``): torch casts a parameter for its cache with grad mode on, also inside
``no_grad``; that switch, inside one call the capture runs for real, is not the program
turning grad mode on, so an in-place write to a parameter before it (RWKV rescales its
weights in place at the first inference call) stays in the one graph."""

from __future__ import annotations

import copy
from typing import Any

import ember.frontend as ef
import pytest
import torch
from torch import nn

BACKENDS = ["eager", "aot_eager"]


class Rescaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(8, 8)
        self.w = nn.Parameter(torch.randn(8, 8))

    def forward(self, x: torch.Tensor) -> Any:
        self.lin.weight.div_(2)  # an in-place write to a parameter, grad mode off
        h = self.lin(x)  # F.linear: autocast casts weight and bias for its cache
        h = self.lin(h)  # the cached casts
        return h @ self.w  # an operator: autocast casts w for its cache


def run_both(backend: str) -> Any:
    x = torch.randn(4, 8)
    eager_model, ember_model = Rescaled(), Rescaled()
    compiled = ef.compile(ember_model, backend=backend)
    for _ in range(2):
        # NOTE: one block per call: within one block eager keeps the cast made before
        # the next call's write (the cache is dropped when the outermost block ends)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            expected, got = eager_model(x), compiled(x)
        torch.testing.assert_close(got, expected)
        assert got.dtype == torch.bfloat16 and not got.requires_grad
    for (name, e), (_, g) in zip(eager_model.state_dict().items(),
                                 ember_model.state_dict().items()):
        torch.testing.assert_close(g, e, msg=name)
    return compiled


@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast_cache_casts_under_no_grad_stay_in_one_graph(backend: str) -> None:
    compiled = run_both(backend)
    assert compiled.stats.graph_breaks == 0, [b.describe() for b in compiled.breaks]
    assert torch.is_grad_enabled()


def test_explain_shows_no_break() -> None:
    model = Rescaled()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        report = ef.explain(copy.deepcopy(model))(torch.randn(4, 8))
    assert report.break_count == 0


def enable_grad_after_write(m: Rescaled, x: torch.Tensor) -> Any:
    m.lin.weight.div_(2)
    with torch.enable_grad():  # the program's own switch still counts
        return m.lin(x)


def test_program_enable_grad_after_a_write_still_breaks() -> None:
    x = torch.randn(4, 8)
    compiled = ef.compile(enable_grad_after_write, backend="eager")
    eager_model, ember_model = Rescaled(), Rescaled()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected, got = enable_grad_after_write(eager_model, x), compiled(ember_model, x)
    torch.testing.assert_close(got, expected)
    assert got.requires_grad == expected.requires_grad
    assert compiled.stats.graph_breaks == 1
    assert "grad mode turned on after an in-place write" in compiled.breaks[0].reason
