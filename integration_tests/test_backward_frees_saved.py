"""A compiled backward frees each saved activation after its last use (issue 19 item 5):
the autograd node drops its references before the backward graph runs
(``ember.runtime.autograd``), the runtime hands the argument list over
(``ember.runtime.compiled.loader.CONSUME``), and the wrapper ``del``-s each input after the
step that last reads it (``codegen/memory_plan.py``). Before, every saved activation
lived to the end of the backward, on top of the gradients it produced."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.runtime import autograd
from ember.runtime.compiled.loader import CONSUME
from torch import nn


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(),
                         nn.Linear(32, 4))


def _alive_after_backward_graph(monkeypatch: pytest.MonkeyPatch, retain_graph: bool
                                ) -> tuple[int, int]:
    """(saved activations, those still alive right after the backward graph ran, while
    the autograd node is still running)."""
    model = _model()
    x = torch.randn(8, 16)
    keep = {id(p) for p in model.parameters()} | {id(x)}
    counts: list[tuple[int, int]] = []
    real_run = autograd._run_backward

    def spying_run(ctx: Any, grads: tuple[Any, ...]) -> tuple[Any, ...]:
        executor = ctx.runner.backward
        consume: Callable[[list[Any]], list[Any]] = getattr(executor, CONSUME)

        def spy(args: list[Any]) -> list[Any]:
            n_saved = ctx.runner.n_saved
            refs = [weakref.ref(a) for a in args[:n_saved]
                    if isinstance(a, torch.Tensor) and id(a) not in keep]
            out = consume(args)
            gc.collect()
            counts.append((len(refs), sum(r() is not None for r in refs)))
            return out

        monkeypatch.setattr(executor, CONSUME, spy)
        try:
            return real_run(ctx, grads)
        finally:
            monkeypatch.setattr(executor, CONSUME, consume)

    monkeypatch.setattr(autograd, "_run_backward", spying_run)
    compiled = ef.compile(model)
    loss = compiled(x).sum()
    loss.backward(retain_graph=retain_graph)
    assert len(counts) == 1
    return counts[0]


def test_saved_activations_are_freed_inside_the_backward(
        monkeypatch: pytest.MonkeyPatch) -> None:
    saved, alive = _alive_after_backward_graph(monkeypatch, retain_graph=False)
    assert saved >= 2  # the ReLU's and the tanh's outputs at least
    assert alive == 0


def test_retain_graph_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    saved, alive = _alive_after_backward_graph(monkeypatch, retain_graph=True)
    assert saved >= 2 and alive == saved


def test_gradients_match_eager_and_a_retained_graph_runs_twice() -> None:
    model, x = _model(), torch.randn(8, 16)
    model(x).sum().backward()
    expected = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    compiled = ef.compile(model)
    loss = compiled(x).sum()
    loss.backward(retain_graph=True)
    loss.backward()  # the saved values are still there the second time
    got = [p.grad for p in model.parameters()]
    for g, e in zip(got, expected, strict=True):
        assert g is not None
        torch.testing.assert_close(g, 2 * e, rtol=1e-4, atol=1e-5)
