"""A module whose ``forward`` is a ``functools.partial`` (accelerate's hooked forward:
``update_wrapper(partial(new_forward, module), old_forward)``), and a partial compiled
directly. Before: ``compile`` raised "strict capture needs a Python function or module,
got partial" (and a partial set after compiling ran eagerly)."""

from __future__ import annotations

import functools

import torch
from strict_helpers import strict
from torch import nn


def _hook(module: nn.Module, *args, scale=1.0, **kwargs):
    return module._old_forward(*args, **kwargs) * scale


def _hooked(scale: float) -> nn.Module:
    torch.manual_seed(0)
    m = nn.Linear(3, 3)
    m._old_forward = m.forward
    m.forward = functools.update_wrapper(functools.partial(_hook, m, scale=scale),
                                         m._old_forward)
    return m


def test_partial_forward_compiles() -> None:
    m = _hooked(2.0)
    compiled = strict(m)
    x = torch.randn(2, 3)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), m(x))
    assert compiled.stats.graphs == 1 and compiled.stats.eager_fallback_calls == 0


def test_partial_forward_set_after_compiling() -> None:
    torch.manual_seed(0)
    m = nn.Linear(3, 3)
    compiled = strict(m)
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), m(x))
    m._old_forward = m.forward
    m.forward = functools.partial(_hook, m, scale=3.0)
    torch.testing.assert_close(compiled(x), m(x))
    assert compiled.stats.eager_fallback_calls == 0


def test_partial_compiled_directly() -> None:
    def f(x, k, *, b):
        return x * k + b

    p = functools.partial(f, k=2, b=1)
    compiled = strict(p)
    torch.testing.assert_close(compiled(torch.ones(2)), p(torch.ones(2)))
    torch.testing.assert_close(compiled(torch.ones(2), k=5), p(torch.ones(2), k=5))
