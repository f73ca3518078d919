"""The aot stage on symbolic shapes end to end (issue 15, item 2): ``ember.frontend.compile``
with ``dynamic=True`` compiles once, with the programs serialized at every stage
boundary, and every batch size gives eager's outputs, gradients, input writes and output
views."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import ember.frontend
import pytest
import torch
from ember.runtime.config import patch


@pytest.fixture(autouse=True)
def _serialize_boundaries() -> Iterator[None]:
    with patch(serialize_boundaries=True):
        yield


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_training_an_mlp_at_three_batch_sizes_compiles_once(backend: str) -> None:
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 8))
    model = copy.deepcopy(eager)
    compiled = ember.frontend.compile(model, backend=backend, dynamic=True)
    for batch in (3, 7, 12):
        x = torch.randn(batch, 16)
        out, expected = compiled(x), eager(x)
        torch.testing.assert_close(out, expected)
        out.square().mean().backward()
        expected.square().mean().backward()
        for ours, theirs in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(ours.grad, theirs.grad, msg=f"batch {batch}")
            ours.grad = theirs.grad = None
    assert compiled.stats.compiles == 1 and compiled.stats.eager_fallback_calls == 0


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_backward_that_needs_a_size_from_a_saved_value(backend: str) -> None:
    # the gradient of a sum expands a scalar back to [s0, 4]: the forward saves a
    # zero-byte size carrier for s0 (inductor allocates it with a run-time size)
    compiled = ember.frontend.compile(lambda x: (x * 2).sum(), backend=backend,
                                      dynamic=True)
    for batch in (3, 9):
        x = torch.randn(batch, 4, requires_grad=True)
        compiled(x).backward()
        torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
    assert compiled.stats.compiles == 1 and compiled.stats.eager_fallback_calls == 0
    assert not compiled.stats.fallbacks


def _scale_tail(x: torch.Tensor) -> torch.Tensor:
    x[1:].mul_(2)
    return x[x.shape[0] // 2:]


def test_an_input_write_and_a_returned_view_at_two_sizes() -> None:
    compiled = ember.frontend.compile(_scale_tail, backend="aot_eager", dynamic=True)
    for batch in (6, 11):
        x = torch.randn(batch, 4)
        ours = x.clone()
        expected = _scale_tail(x)
        out = compiled(ours)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(ours, x)
        assert out.untyped_storage().data_ptr() == ours.untyped_storage().data_ptr()
        assert out.storage_offset() == 4 * (batch // 2)
    assert compiled.stats.compiles == 1
