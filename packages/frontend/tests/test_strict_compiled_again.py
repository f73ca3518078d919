"""Compiling what is compiled already: a module whose ``forward`` was replaced by a
compiled function (``m.forward = compile(m.forward)``), or a compiled function compiled
again, is captured from the Python function underneath (it raised ``TypeError: strict
capture needs a Python function or module, got StrictFunction`` where eager ran)."""

from __future__ import annotations

import torch
from strict_helpers import strict
from torch import nn


def test_a_module_whose_forward_is_compiled() -> None:
    torch.manual_seed(0)
    model = nn.Linear(2, 2)
    model.forward = strict(model.forward)  # type: ignore[method-assign]
    compiled = strict(model)
    x = torch.ones(1, 2)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), nn.functional.linear(x, model.weight,
                                                                     model.bias))
        with torch.no_grad():
            model.weight.add_(1)
    assert compiled.stats.compiles == 1


def test_a_compiled_function_compiled_again() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.sin() * 2

    twice = strict(strict(fn))
    x = torch.arange(3.0)
    for _ in range(2):
        torch.testing.assert_close(twice(x), fn(x))
    assert twice.stats.graphs == 1 and twice.stats.graph_breaks == 0
