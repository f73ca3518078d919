"""A backward that calls an op whose output shape depends on data (``index_fill``'s
gradient for its value takes ``_unique`` of the index) cannot be traced ahead of time: the
aot stage declines the graph, which then runs eagerly, warned and counted, with eager's
gradients (it used to crash with ``DynamicOutputShapeException``)."""

from __future__ import annotations

import ember.frontend
import pytest
import torch
from ember.runtime.stages import EagerGraphWarning


def fill(x: torch.Tensor, value: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return (x.index_fill(0, index, value) * 2).sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_data_dependent_backward_runs_eagerly_and_is_counted(backend: str) -> None:
    index = torch.tensor([0, 2, 2])
    x, value = torch.randn(5, 3, requires_grad=True), torch.tensor(2.0, requires_grad=True)
    expected = torch.autograd.grad(fill(x, value, index), (x, value))
    compiled = ember.frontend.compile(fill, backend=backend)
    with pytest.warns(EagerGraphWarning, match=r"the backward calls aten\._unique\.default, "
                                               r"whose output shape depends on the data"):
        actual = torch.autograd.grad(compiled(x, value, index), (x, value))
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)
    assert compiled.stats.fallbacks == 1 and compiled.stats.graph_breaks == 0


def grow_input(x: torch.Tensor) -> torch.Tensor:
    x.resize_(6)
    return x[:3] * 2


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_resizing_an_input_runs_eagerly_and_is_counted(backend: str) -> None:
    """``x.resize_(6)`` on a 3-element input: the caller's tensor changes size, which a
    compiled program cannot do; the graph runs eagerly (it raised ``IRFormatError``)."""
    compiled = ember.frontend.compile(grow_input, backend=backend)
    x, reference = torch.randn(3), torch.randn(3)
    reference.copy_(x)
    with pytest.warns(EagerGraphWarning, match=r"resize_ changes the shape of \(a view"):
        got = compiled(x)
    torch.testing.assert_close(got, grow_input(reference))
    assert x.shape == (6,) and compiled.stats.fallbacks == 1
