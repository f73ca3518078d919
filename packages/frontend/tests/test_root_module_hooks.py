"""Hooks registered on the compiled module itself (bytecode/root_hooks.py). The strict
capture compiles ``forward``, so ``nn.Module.__call__``'s hooks of the root module were
silently skipped: a forward hook's result, a pre-hook's new input and a full backward
hook were all lost (the trace capture, which calls the module, ran them)."""

from __future__ import annotations

import functools
from typing import Any

import ember.frontend as ef
import pytest
import torch
from torch import nn


def _hooked(with_kwargs: bool) -> nn.Module:
    torch.manual_seed(0)
    m = nn.Linear(4, 3)
    if with_kwargs:
        m.register_forward_pre_hook(lambda mod, a, kw: ((a[0] + 1,), kw), with_kwargs=True)
        m.register_forward_hook(lambda mod, a, kw, out: out * 10, with_kwargs=True)
    else:
        m.register_forward_pre_hook(lambda mod, a: a[0] + 1)
        m.register_forward_hook(lambda mod, a, out: out * 10)
    return m


@pytest.mark.parametrize("capture", ["strict", "trace"])
@pytest.mark.parametrize("with_kwargs", [False, True])
def test_forward_hooks_of_the_compiled_module_run(capture: str, with_kwargs: bool) -> None:
    m = _hooked(with_kwargs)
    compiled = ef.compile(m, backend="eager", options={"capture": capture})
    x = torch.randn(2, 4)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), m(x))
    assert compiled.stats.graph_breaks == 0 and compiled.stats.eager_fallback_calls == 0


def test_backward_hook_of_the_compiled_module_runs() -> None:
    seen: list[Any] = []
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    m.register_full_backward_hook(lambda mod, gin, gout: seen.append(gout[0].clone()))
    compiled = ef.compile(m, backend="eager")
    x = torch.randn(2, 4, requires_grad=True)
    m(x).sum().backward()
    compiled(x).sum().backward()
    assert len(seen) == 2
    torch.testing.assert_close(seen[1], seen[0])
    assert compiled.stats.eager_fallback_calls == 1  # logged: the call ran eagerly
    assert "backward hooks" in compiled._compiled.breaks[0].reason


class _Replaceable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def test_a_forward_replaced_after_compiling_is_called() -> None:
    # before: the compiled module kept running the forward it was compiled from
    torch.manual_seed(0)
    m = _Replaceable()
    compiled = ef.compile(m, backend="eager")
    x = torch.ones(2, 3)
    torch.testing.assert_close(compiled(x), m(x))
    m.forward = lambda x: m.lin(x) * 100  # type: ignore[method-assign]
    torch.testing.assert_close(compiled(x), m(x))
    m.register_forward_hook(lambda mod, args, out: out + 1)
    torch.testing.assert_close(compiled(x), m(x))
    del m.forward
    torch.testing.assert_close(compiled(x), m(x))
    original = _Replaceable.forward
    try:
        _Replaceable.forward = lambda self, x: self.lin(x) - 5  # type: ignore[method-assign]
        torch.testing.assert_close(compiled(x), m(x))
    finally:
        _Replaceable.forward = original  # type: ignore[method-assign]
    torch.testing.assert_close(compiled(x), m(x))
    assert compiled.stats.graphs == 3 and compiled.stats.eager_fallback_calls == 0
    m.forward = functools.partial(torch.mul, other=3.0)  # type: ignore[method-assign]
    torch.testing.assert_close(compiled(x), m(x))
    # a builtin's partial: called from a Python function (wrapped_callables)
    assert (compiled.stats.graphs, compiled.stats.eager_fallback_calls) == (4, 0)
