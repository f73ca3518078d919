"""Automatic dynamic for Python ints (``bytecode/symbolic_ints.py``): an int argument or
attribute whose value changed between two captures becomes a size symbol (the size of a
carrier input), so a step counter or a position passed as an int compiles twice, not
once per value until the recompile limit; code that needs the value specialises it, and
code that cannot take a SymInt turns symbolic ints off for the function."""

from __future__ import annotations

import math
import warnings
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.frontend.compiled import RecompileLimitWarning
from ember.runtime.config import patch
from torch import nn

TABLE = {2: 1.0, 3: 2.0, 4: 3.0, 5: 4.0}


def scaled(x: torch.Tensor, n: int) -> torch.Tensor:
    return x[:n].sum() + x.reshape(n, -1).shape[1] * n


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_an_int_argument_that_changes_compiles_twice(backend: str,
                                                     capsys: Any) -> None:
    f = ef.compile(scaled, backend=backend)
    x = torch.randn(48)
    with warnings.catch_warnings(), patch(logs=frozenset({"dynamic"})):
        warnings.simplefilter("error", RecompileLimitWarning)
        for n in (2, 3, 4, 6, 8, 12, 16, 24, 48, 3):
            torch.testing.assert_close(f(x, n), scaled(x, n))
    assert f.stats.compiles == 2 and f.stats.graph_breaks == 0, f.stats
    err = capsys.readouterr().err
    assert "automatic: n changed 2 -> 3 in scaled, recompiling with it symbolic" in err, err
    assert "int_carrier(n).size(0) is symbolic" in err, err


class Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.step = 0
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.step += 1
        return self.lin(x) * self.step


def test_a_step_counter_attribute_stays_under_the_recompile_limit() -> None:
    torch.manual_seed(0)
    model, twin = Counter(), Counter()
    twin.load_state_dict(model.state_dict())
    compiled = ef.compile(model)
    x = torch.randn(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompileLimitWarning)
        for _ in range(20):
            torch.testing.assert_close(compiled(x), twin(x))
    assert model.step == twin.step == 20
    # steps 1 and 2 are static (sizes 0 and 1 specialise), then one symbolic capture
    assert compiled.stats.compiles == 3, compiled.stats


@pytest.mark.parametrize("name, fn, compiles", [
    ("needs the value", lambda x, n: x / math.sqrt(n), 4),
    ("a dict key", lambda x, n: x * TABLE[n], 4),
    ("a Python branch", lambda x, n: x + 1 if n > 3 else x - 1, 3),
])
def test_code_that_needs_the_value_still_gets_it(name: str, fn: Any, compiles: int) -> None:
    f = ef.compile(fn, backend="aot_eager")
    x = torch.randn(8)
    for n in (2, 3, 4, 5, 3):
        torch.testing.assert_close(f(x, n), fn(x, n))
    assert f.stats.eager_fallback_calls == 0, (name, f.stats)
    assert f.stats.compiles == compiles, (name, f.stats)


def test_other_values_of_the_argument_miss_the_symbolic_entry() -> None:
    f = ef.compile(scaled, backend="aot_eager")
    x = torch.randn(48)
    for n in (2, 3, 4):
        f(x, n)
    before = f.stats.compiles
    torch.testing.assert_close(f(x, 1), scaled(x, 1))  # 1: below the symbol's range
    torch.testing.assert_close(f(x.double(), 6), scaled(x.double(), 6))
    assert f.stats.compiles == before + 2, f.stats
