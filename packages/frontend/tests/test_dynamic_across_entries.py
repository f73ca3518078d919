"""Automatic dynamic shapes across cache entries (``DynamicPolicy.note_misses``): a
size that changed between two captures of the same code is made symbolic whatever else
changed beside it, and every entry of the code is compared, not only the newest: a
per-expert loop after a break (HF SwitchTransformers' experts) no longer fills the
recompile limit with one entry per token count. Parameters and buffers stay static."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from ember.frontend.compiled import RecompileLimitWarning
from ember.runtime.config import patch
from strict_helpers import strict
from torch import nn


def scaled(x: torch.Tensor, flag: bool) -> torch.Tensor:
    return x * 2 if flag else x - 1


@pytest.mark.parametrize("capture", ["strict", "trace"])
def test_a_size_that_changed_beside_another_guard_is_made_symbolic(capture: str) -> None:
    import ember.frontend as ef

    f = ef.compile(scaled, backend="aot_eager", options={"capture": capture})
    for n, flag in ((8, True), (16, False), (24, False), (32, True), (40, True), (48, False)):
        x = torch.randn(n, 4)
        torch.testing.assert_close(f(x, flag), scaled(x, flag))
    # (8, True) static; (16, False) misses on the flag and the size: symbolic from here
    # on; (32, True): the same symbolic capture for the other flag
    assert f.stats.compiles == 3, f.stats


class Experts(nn.ModuleDict):
    """Mixture-of-experts dispatch as HF writes it: the expert's name is formatted from
    a tensor (a graph break), and the tokens routed to it vary in number."""

    def __init__(self, n: int) -> None:
        super().__init__({f"expert_{i}": nn.Linear(8, 8) for i in range(n)})
        self.n = n

    def forward(self, h: torch.Tensor, routed: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(h)
        hit = (nn.functional.one_hot(routed, self.n).sum(0) > 0).nonzero()
        for e in hit:
            (tokens,) = torch.where(routed == e)
            y = self[f"expert_{e[0]}"](h[tokens])
            out.index_add_(0, tokens, y)  # requires grad from the first expert on
        return out


def test_a_per_expert_loop_stays_under_the_recompile_limit() -> None:
    torch.manual_seed(0)
    model = Experts(3)
    compiled = strict(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompileLimitWarning)
        for _ in range(8):
            h = torch.randn(48, 8)
            routed = torch.randint(0, 3, (48,))
            torch.testing.assert_close(compiled(h, routed), model(h, routed))
    assert compiled.stats.recompile_limit_fallbacks == 0, compiled.stats


def test_parameters_stay_static_when_a_wider_model_is_swapped_in(capsys: Any) -> None:
    class Wrap(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)

    model = Wrap(nn.Linear(8, 8))
    compiled = strict(model)
    with patch(logs=frozenset({"dynamic"})):
        for inner in (nn.Linear(8, 16), nn.Sequential(nn.Linear(8, 24))):
            compiled(torch.randn(4, 8))
            model.inner = inner
        x = torch.randn(4, 8)
        torch.testing.assert_close(compiled(x), model(x))
    err = capsys.readouterr().err
    assert "symbolic" not in err, err
    assert compiled.stats.compiles == 3, compiled.stats
