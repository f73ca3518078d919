"""Strict capture: the modules handed to a torch function that runs as one recorded call
(``checkpoint``, ``torch.func.functional_call``, a parametrized weight's getter) have
their ``training`` flags and plain attributes guarded (``bytecode.opaque_modules``).
Before, ``m.eval()`` or ``m.sub.s = 5.0`` left the graph running the first call's
branch: spectral norm kept running its power iteration in ``eval()``."""

from __future__ import annotations

from collections.abc import Callable

import ember.frontend as ef
import pytest
import torch
import torch.nn.utils.parametrize as parametrize
from torch import nn
from torch.utils.checkpoint import checkpoint


class _Sub(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.s = 2.0
        self.l = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l(x) * self.s if self.training else self.l(x) - 1


class _Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sub = _Sub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.sub, x, use_reentrant=False)


class _FunctionalCall(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sub = _Sub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(self.sub, dict(self.sub.named_parameters()), (x,))


class _Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.s = 2.0

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w * self.s if self.training else w


def _parametrized() -> nn.Module:
    m = nn.Linear(4, 4)
    parametrize.register_parametrization(m, "weight", _Scale())
    return m


def _inner(m: nn.Module) -> nn.Module:
    return m.parametrizations.weight[0] if hasattr(m, "parametrizations") else m.sub


@pytest.mark.parametrize("change", ["attribute", "eval"])
@pytest.mark.parametrize("make", [_Checkpointed, _FunctionalCall, _parametrized],
                         ids=["checkpoint", "functional_call", "parametrize"])
def test_a_change_read_inside_a_recorded_torch_call_compiles_again(
        make: Callable[[], nn.Module], change: str) -> None:
    torch.manual_seed(0)
    m = make()
    compiled = ef.compile(m)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), m(x))
    if change == "attribute":
        _inner(m).s = 5.0
    else:
        m.eval()
    torch.testing.assert_close(compiled(x), m(x))


def test_spectral_norm_stops_its_power_iteration_in_eval() -> None:
    torch.manual_seed(0)
    m = torch.nn.utils.parametrizations.spectral_norm(nn.Linear(6, 6))
    compiled = ef.compile(m)
    x = torch.randn(4, 6)
    compiled(x)
    m.eval()
    u = m.parametrizations.weight[0]._u.clone()
    torch.testing.assert_close(compiled(x), m(x))
    torch.testing.assert_close(m.parametrizations.weight[0]._u, u)  # eval: no update
