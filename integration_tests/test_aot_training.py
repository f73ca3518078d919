"""Training end to end through ``ember.frontend.compile``: one optimizer step of an MLP,
a conv net with BatchNorm and a transformer block gives the parameters, gradients and
buffers eager torch gives (float32, docs/architecture.md), under ``aot_eager`` and ``inductor``,
with the programs serialized at every stage boundary."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator

import ember.frontend
import pytest
import torch
from ember.runtime.config import patch
from ember_testing.training import MODELS, assert_same_training_state, mlp, sgd_step


@pytest.fixture(autouse=True)
def _serialize_boundaries() -> Iterator[None]:
    with patch(serialize_boundaries=True):
        yield


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("name,make_model,make_input", MODELS, ids=[m[0] for m in MODELS])
def test_one_optimizer_step(backend: str, name: str, make_model: Callable[[], torch.nn.Module],
                            make_input: Callable[[], torch.Tensor]) -> None:
    torch.manual_seed(0)
    eager = make_model().train()
    compiled_model = copy.deepcopy(eager)
    compiled = ember.frontend.compile(compiled_model, backend=backend)
    x = make_input()
    with torch.no_grad():
        target = torch.randn_like(copy.deepcopy(eager)(x))

    sgd_step(eager, eager, x, target)
    sgd_step(compiled_model, compiled, x, target)
    assert_same_training_state(eager, compiled_model)


def test_no_grad_call_builds_no_backward() -> None:
    model = mlp()
    compiled = ember.frontend.compile(model, backend="aot_eager")
    x = torch.randn(8, 16)
    with torch.no_grad():
        out = compiled(x)
    assert out.grad_fn is None
    torch.testing.assert_close(out, model(x))
