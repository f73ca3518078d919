"""The aot stage end to end through ``ember.frontend.compile(backend="aot_eager")``: the
mutation and aliasing corpus (outputs, inputs after the call, aliasing equal to eager),
with every program serialized at the stage boundaries."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import ember.frontend
import pytest
import torch
from ember.runtime.config import patch
from ember_testing.mutation_corpus import CORPUS, check_against_eager


@pytest.fixture(autouse=True)
def _serialize_boundaries() -> Iterator[None]:
    with patch(serialize_boundaries=True):
        yield


@pytest.mark.parametrize("name,fn,make_inputs", CORPUS, ids=[c[0] for c in CORPUS])
def test_corpus_under_aot_eager(name: str, fn: Callable[..., Any],
                                make_inputs: Callable[[], tuple[torch.Tensor, ...]]) -> None:
    compiled = ember.frontend.compile(fn, backend="aot_eager")
    check_against_eager(fn, compiled, make_inputs())
    check_against_eager(fn, compiled, make_inputs())  # the second call reuses the program


def test_batchnorm_running_stats() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6))
    compiled_model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6))
    compiled_model.load_state_dict(model.state_dict())
    compiled = ember.frontend.compile(compiled_model, backend="aot_eager")
    for _ in range(2):
        x = torch.randn(8, 4)
        torch.testing.assert_close(compiled(x), model(x))
    for (name, e), (_, g) in zip(model.named_buffers(), compiled_model.named_buffers()):
        torch.testing.assert_close(g, e, msg=f"buffer {name}")


def test_same_tensor_passed_twice() -> None:
    def fn(a, b):
        a.add_(1)
        return a + b

    compiled = ember.frontend.compile(fn, backend="aot_eager")
    x = torch.randn(3, 4)
    eager_x, compiled_x = x.clone(), x.clone()
    torch.testing.assert_close(compiled(compiled_x, compiled_x), fn(eager_x, eager_x))
    torch.testing.assert_close(compiled_x, eager_x)


def test_view_of_parameter_mutated_under_no_grad() -> None:
    def fn(x):
        x.add_(1)
        return x * 2

    weight = torch.nn.Parameter(torch.randn(3, 4))
    eager_weight = weight.detach().clone()
    compiled = ember.frontend.compile(fn, backend="aot_eager")
    with torch.no_grad():
        expected = fn(eager_weight[0])
        got = compiled(weight[0])
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(weight.detach(), eager_weight)


def test_input_that_views_another_input() -> None:
    def fn(a, b):
        a.add_(1)
        return b * 2

    compiled = ember.frontend.compile(fn, backend="aot_eager")
    for _ in range(2):
        base = torch.randn(3, 4)
        eager, mine = base.clone(), base.clone()
        torch.testing.assert_close(compiled(mine, mine[1]), fn(eager, eager[1]))
        torch.testing.assert_close(mine, eager)
