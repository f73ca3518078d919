"""A stage that declines a symbolic program (``ember.frontend.declined_sizes``): the
function compiles per size from then on instead of running its graph eagerly.

``cumprod``'s backward needs its dimension's size as a constant (torch's formula), so the
aot stage declines a training program with that size symbolic."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import ember.frontend as ef
import pytest
import torch
import torch.nn.functional as F
from ember.runtime.config import patch
from ember.runtime.stages import EagerGraphWarning

CAPTURES = ["strict", "trace"]


def _cumprod(x: torch.Tensor) -> torch.Tensor:
    return torch.cumprod(x, 1).sin()


@pytest.fixture
def no_eager_graph() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error", EagerGraphWarning)
        yield


def _step_matches_eager(compiled: Any, n: int) -> None:
    x = torch.randn(3, n, requires_grad=True)
    compiled(x).sum().backward()
    expected = x.detach().clone().requires_grad_()
    _cumprod(expected).sum().backward()
    torch.testing.assert_close(x.grad, expected.grad)


@pytest.mark.usefixtures("no_eager_graph")
@pytest.mark.parametrize("capture", CAPTURES)
def test_dynamic_true_compiles_per_size_after_a_decline(
        capture: str, capsys: pytest.CaptureFixture[str]) -> None:
    compiled = ef.compile(_cumprod, dynamic=True, options={"capture": capture})
    with patch(logs=frozenset({"dynamic"})):
        for n in (5, 7, 9, 7):
            _step_matches_eager(compiled, n)
    stats = compiled.stats
    assert (stats.compiles, stats.recompiles, stats.cache_hits) == (3, 2, 1)
    assert stats.eager_fallback_calls == 0
    err = capsys.readouterr().err
    assert err.count("symbolic sizes off for _cumprod") == 1
    assert "specialised size 's1' of input 'x' (dim 1) to 5" in err


@pytest.mark.usefixtures("no_eager_graph")
@pytest.mark.parametrize("capture", CAPTURES)
def test_automatic_dynamic_falls_back_to_static_sizes(capture: str) -> None:
    compiled = ef.compile(_cumprod, options={"capture": capture})
    for n in (5, 7, 9):
        _step_matches_eager(compiled, n)
    assert (compiled.stats.compiles, compiled.stats.eager_fallback_calls) == (3, 0)


@pytest.mark.parametrize("capture", CAPTURES)
def test_a_marked_dimension_keeps_the_eager_fallback(capture: str) -> None:
    """The user asked for that size to be symbolic: no per-size compiles behind their
    back; the graph runs eagerly with the stage's warning, once."""
    compiled = ef.compile(_cumprod, options={"capture": capture})
    for n, warned in ((5, True), (7, False)):
        x = torch.randn(3, n, requires_grad=True)
        ef.mark_dynamic(x, 1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled(x).sum().backward()
        messages = [str(w.message) for w in caught if w.category is EagerGraphWarning]
        assert bool(messages) == warned, messages
    assert compiled.stats.compiles == 1
    assert compiled.stats.fallbacks == 1


@pytest.mark.usefixtures("no_eager_graph")
@pytest.mark.parametrize("capture", CAPTURES)
def test_an_op_without_a_symbolic_kernel_compiles_per_size(capture: str) -> None:
    """torch's meta kernel of bicubic antialiased upsampling's backward takes no
    symbolic sizes: the aot stage declines the symbolic program for its sizes."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, size=(3, 5), mode="bicubic", antialias=True)

    compiled = ef.compile(fn, dynamic=True, options={"capture": capture})
    for n in (2, 4):
        x = torch.randn(n, 3, 8, 8, requires_grad=True)
        compiled(x).sum().backward()
        expected = x.detach().clone().requires_grad_()
        fn(expected).sum().backward()
        torch.testing.assert_close(x.grad, expected.grad)
    assert compiled.stats.compiles == 2


def test_a_decline_for_another_reason_keeps_one_symbolic_entry() -> None:
    """An in-place ``squeeze_`` of an input changes the caller's tensor's sizes, which a
    compiled program does not do: declined whatever the sizes, so no per-size compiles;
    the graph runs eagerly once for every size (and squeezes the caller's tensor)."""
    compiled = ef.compile(lambda x: x.squeeze_(), dynamic=True)
    warned = []
    for n in (4, 5, 6):
        x = torch.randn(n, 1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = compiled(x)
        warned.append(sum(w.category is EagerGraphWarning for w in caught))
        assert x.shape == (n,) and out.shape == (n,) and out.data_ptr() == x.data_ptr()
    assert warned == [1, 0, 0]
    assert (compiled.stats.compiles, compiled.stats.cache_hits) == (1, 2)


@pytest.mark.usefixtures("no_eager_graph")
@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
def test_a_call_that_fails_with_symbolic_sizes_compiles_per_size(
        capture: str, dynamic: bool | None, capsys: pytest.CaptureFixture[str]) -> None:
    """``F.interpolate`` with a scale of 1.5 computes its output size through a float
    the IR does not hold: the capture turns symbolic sizes off and records the whole
    graph per size. Before, strict capture broke the graph there (the upsampling ran
    eagerly) and trace capture with ``dynamic=True`` failed."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1),
                                torch.nn.Upsample(scale_factor=1.5, mode="bilinear"),
                                torch.nn.ReLU())
    compiled = ef.compile(model, dynamic=dynamic, options={"capture": capture})
    with patch(logs=frozenset({"dynamic"})):
        for size in (8, 10, 12):
            x = torch.randn(2, 3, size, size)
            torch.testing.assert_close(compiled(x), model(x))
    assert (compiled.stats.graphs, compiled.stats.graph_breaks) == (3, 0)
    err = capsys.readouterr().err
    assert err.count("symbolic sizes off") == 1
    assert "a call failed with symbolic sizes" in err and "ToFloat" in err
