"""A backward that calls an op whose output shape depends on data (``index_fill``'s
gradient for its value takes ``_unique`` of the index; ``x[mask] = v``'s reads
``grad[mask]``) is traced again under a shape environment, where that shape is an unbacked
symbol: the graph compiles, the op runs as an extern call (counted as a fallback by the
inductor). Where even that cannot trace it, the aot stage declines the graph, which then
runs eagerly, warned and counted, with eager's gradients (it used to crash with
``DynamicOutputShapeException``)."""

from __future__ import annotations

import warnings
from typing import Any

import ember.aot.pipeline
import ember.frontend
import pytest
import torch
from ember.aot._torch import DATA_DEPENDENT_ERRORS
from ember.runtime.stages import EagerGraphWarning


def fill(x: torch.Tensor, value: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return (x.index_fill(0, index, value) * 2).sum()


def put(x: torch.Tensor, value: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[x.detach() > 0] = value
    return (y * 2).sum()


@pytest.mark.parametrize("fn", [fill, put])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_data_dependent_backward_compiles(backend: str, fn: Any) -> None:
    compiled = ember.frontend.compile(fn, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EagerGraphWarning)
        for index in ([0, 2, 2], [4, 1, 1]):
            x, value = torch.randn(5, 3, requires_grad=True), torch.tensor(2.0, requires_grad=True)
            expected = torch.autograd.grad(fn(x, value, torch.tensor(index)), (x, value))
            actual = torch.autograd.grad(compiled(x, value, torch.tensor(index)), (x, value))
            for a, e in zip(actual, expected):
                torch.testing.assert_close(a, e)
    assert compiled.stats.compiles == 1 and compiled.stats.eager_fallback_calls == 0
    if backend == "inductor":  # _unique, nonzero: no lowering, run as extern calls
        assert compiled.stats.fallbacks >= 1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_backward_not_even_a_shape_environment_traces_runs_eagerly_and_is_counted(
        backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    traced = ember.aot.pipeline.trace_joint

    def without_symbolic_sizes(*args: Any, symbolic: bool = False) -> Any:
        if symbolic:  # what an op torch cannot describe with unbacked symbols raises
            raise DATA_DEPENDENT_ERRORS[-1](torch.ops.aten._unique.default)
        return traced(*args)

    monkeypatch.setattr(ember.aot.pipeline, "trace_joint", without_symbolic_sizes)
    index = torch.tensor([0, 2, 2])
    x, value = torch.randn(5, 3, requires_grad=True), torch.tensor(2.0, requires_grad=True)
    expected = torch.autograd.grad(fill(x, value, index), (x, value))
    compiled = ember.frontend.compile(fill, backend=backend)
    with pytest.warns(EagerGraphWarning, match=r"the backward calls an op whose output shape "
                                               r"depends on the data.*_unique"):
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
