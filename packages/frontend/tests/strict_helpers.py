"""Shared helpers of the strict-mode tests."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import torch


def strict(fn: Any, **kw: Any) -> Any:
    options = dict(kw.pop("options", {}))
    options["capture"] = "strict"
    return ef.compile(fn, backend="eager", options=options, **kw)


def assert_same(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), (type(a), type(b))
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    else:
        assert a == b, (a, b)


def check(fn: Any, *args: Any, graphs: int, breaks: int, compiles: int | None = None,
          calls: int = 2, dynamic: bool | None = None) -> Any:
    """Compile ``fn`` strictly (with ``dynamic``), call it ``calls`` times on clones of
    ``args`` and compare results and inputs after the call with eager; assert
    graph/break/compile counts."""
    compiled = strict(fn, dynamic=dynamic)
    for _ in range(calls):
        eager_args = copy.deepcopy(args)
        ember_args = copy.deepcopy(args)
        expected = fn(*eager_args)
        got = compiled(*ember_args)
        assert_same(got, expected)
        assert_same(list(ember_args), list(eager_args))
    stats = compiled.stats
    assert stats.graphs == graphs, stats
    assert stats.graph_breaks == breaks, stats
    if compiles is not None:
        assert stats.compiles == compiles, stats
    return compiled


def run3(fn: Callable[..., Any], make_args: Callable[[int], tuple[Any, ...]]) -> Any:
    """Call ``fn`` eagerly and compiled on three different inputs; compare."""
    compiled = strict(fn)
    for i in range(3):
        expected = fn(*make_args(i))
        got = compiled(*make_args(i))
        assert_same(got, expected)
    return compiled


def vec(i: int) -> tuple[torch.Tensor]:
    return (torch.arange(3.0) * (i + 1) - i,)


def captured_call(model: torch.nn.Module) -> tuple[Any, Any, Any]:
    """The guards, input sources and ``(state, ctx)`` arguments of the guard check of a
    warm call of ``model`` compiled strictly (one segment, a ``(2, 4)`` input)."""
    torch.manual_seed(0)
    compiled = strict(model)
    x = torch.randn(2, 4, device=next(model.parameters()).device)
    compiled(x)
    (segment,) = compiled._compiled.segments[0]
    seen: list[Any] = []
    inner = segment.match

    def spy(state: Any, ctx: Any) -> Any:
        seen.append((state, ctx))
        return inner(state, ctx)

    segment.match = spy
    compiled(x)
    return segment.guards.guards, segment.input_sources, seen[0]


class LinearStack(torch.nn.Module):
    """``n`` 4x4 linear layers applied in turn: a model with many parameters to guard."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x
