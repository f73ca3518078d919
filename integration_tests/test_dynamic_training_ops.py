"""Training with dropout and with batch norm over a symbolic batch, end to end through
``ember.frontend.compile`` (issue 15 follow-up): one compile serves two batch sizes and no
graph runs eagerly (an aot decline or an inductor compile error would be an
``EagerGraphWarning``, made an error here).

Random values: ``aot_eager`` and ``inductor`` with ``eager_random`` draw on torch's
generator, so under one seed they equal eager's; the inductor's own generator does not
(its contract: reproducible under ``torch.manual_seed``, other values), so there the
mask's statistics, its agreement with the gradients and reproducibility are checked."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator
from typing import Any

import ember.frontend
import pytest
import torch
from ember.runtime.stages import EagerGraphWarning
from ember_testing.training import assert_same_training_state, conv_bn, sgd_step

P = 0.25


@pytest.fixture(autouse=True)
def _no_eager_graph() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error", EagerGraphWarning)
        yield


def _dropout_mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(P),
                               torch.nn.Linear(32, 4)).train()


@pytest.mark.parametrize("backend,options", [
    ("aot_eager", {}), ("inductor", {"eager_random": True})], ids=["aot_eager", "inductor"])
def test_dropout_mlp_trains_like_eager_at_two_batch_sizes(
        backend: str, options: dict[str, Any]) -> None:
    eager = _dropout_mlp()
    model = copy.deepcopy(eager)
    compiled = ember.frontend.compile(model, backend=backend, dynamic=True, options=options)
    for n in (5, 12):
        x, target = torch.randn(n, 16), torch.randn(n, 4)
        torch.manual_seed(n)
        sgd_step(eager, eager, x, target)
        torch.manual_seed(n)
        sgd_step(model, compiled, x, target)
        assert_same_training_state(eager, model)
    assert compiled.stats.compiles == 1 and compiled.stats.eager_fallback_calls == 0


def test_dropout_on_the_inductors_generator_at_two_batch_sizes() -> None:
    compiled = ember.frontend.compile(torch.nn.Dropout(P).train(), backend="inductor",
                                      dynamic=True)
    for n in (300, 1000):
        x = (torch.rand(n, 8) + 0.5).requires_grad_()  # no zeros: out == 0 is the mask
        torch.manual_seed(n)
        out = compiled(x)
        torch.manual_seed(n)
        assert torch.equal(compiled(x).detach(), out.detach())  # reproducible
        kept = out != 0
        assert abs((~kept).double().mean().item() - P) < 0.04
        torch.testing.assert_close(out, torch.where(kept, x.detach() / (1 - P), 0.0))
        g = torch.randn_like(out)
        out.backward(g)
        torch.testing.assert_close(x.grad, torch.where(kept, g / (1 - P), 0.0))
    assert compiled.stats.compiles == 1 and compiled.stats.eager_fallback_calls == 0
    assert compiled.stats.fallbacks == 0


def test_dropout_mlp_on_the_inductors_generator_trains_at_two_batch_sizes() -> None:
    model = _dropout_mlp()
    compiled = ember.frontend.compile(model, backend="inductor", dynamic=True)
    for n in (5, 12):
        out = compiled(torch.randn(n, 16))
        assert out.shape == (n, 4)
        out.square().mean().backward()
        grads = [p.grad for p in model.parameters()]
        assert all(g is not None and g.isfinite().all() and g.any() for g in grads)
        model.zero_grad()
    assert compiled.stats.compiles == 1 and compiled.stats.eager_fallback_calls == 0
    assert compiled.stats.fallbacks == 0


def test_conv_batch_norm_training_step_over_a_symbolic_batch() -> None:
    torch.manual_seed(0)
    eager = conv_bn().train()
    model = copy.deepcopy(eager)
    compiled = ember.frontend.compile(model, backend="inductor")
    for n in (4, 6, 9):
        x = torch.randn(n, 3, 8, 8)
        ember.frontend.mark_dynamic(x, 0)
        target = torch.randn(n, 5)
        sgd_step(eager, eager, x, target)
        sgd_step(model, compiled, x, target)
        assert_same_training_state(eager, model)
    assert compiled.stats.compiles == 1 and compiled.stats.eager_fallback_calls == 0
    assert compiled.stats.kernels and compiled.stats.fallbacks == 0  # batch norm too


def _padded_rows(x: torch.Tensor) -> torch.Tensor:
    pad = (4 - x.shape[-1] % 4) % 4
    return torch.nn.functional.pad(x, (0, pad)).view(x.shape[0], -1, 4).sum(-1)


@pytest.mark.parametrize("capture", ["strict", "trace"])
def test_a_size_the_backward_specialised_compiles_again(capture: str) -> None:
    """Padding to a multiple of 4 and viewing rows of 4, trained over lengths 1, 3, 4,
    5, 9: the symbolic program, compiled at length 3 (one row), carries aot's guard that
    there is one row, which the capture did not have. It is now a guard of the entry:
    length 5 compiles again (it raised ShapeError)."""
    compiled = ember.frontend.compile(_padded_rows, options={"capture": capture})
    for n in (1, 3, 4, 5, 9):
        x = torch.randn(2, n, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        got, want = compiled(x2), _padded_rows(x)
        torch.testing.assert_close(got, want)
        (got * torch.arange(got.shape[1])).sum().backward()
        (want * torch.arange(want.shape[1])).sum().backward()
        torch.testing.assert_close(x2.grad, x.grad)
    assert compiled.stats.compiles == 3  # static 1, symbolic with one row, symbolic


def hand_written_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # var's and std's backward scale by 2 / (N - 1), a float of a symbolic size
    centred = x - x.mean(0)
    return (centred / x.std(0) * w + x.var(0, correction=0)).sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_float_made_from_a_symbolic_size_trains_at_two_batch_sizes(backend: str) -> None:
    compiled = ember.frontend.compile(hand_written_norm, backend=backend, dynamic=True)
    for n in (6, 17):
        x, w = torch.randn(n, 5, requires_grad=True), torch.randn(5, requires_grad=True)
        rx, rw = (t.detach().clone().requires_grad_(True) for t in (x, w))
        compiled(x, w).backward()
        hand_written_norm(rx, rw).backward()  # type: ignore[no-untyped-call]
        torch.testing.assert_close((x.grad, w.grad), (rx.grad, rw.grad), msg=f"n={n}")
    assert compiled.stats.compiles == 1 and compiled.stats.eager_fallback_calls == 0


def _multilabel(a: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.multilabel_margin_loss(a, t)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_multilabel_margin_loss_trains_at_two_batch_sizes(backend: str) -> None:
    """torch's ``multilabel_margin_loss_backward`` has no kernel for symbolic sizes; the
    aot stage's decomposition of it keeps one compile for every batch (it compiled per
    size). Rows with entries after their ``-1``, duplicate and all-target rows."""
    compiled = ember.frontend.compile(_multilabel, backend=backend, dynamic=True)
    for n in (4, 7):
        torch.manual_seed(n)
        a, t = torch.randn(n, 5, requires_grad=True), torch.randint(-1, 5, (n, 5))
        t[0], t[1, 0], t[2, :3] = torch.arange(5), -1, 2
        ra = a.detach().clone().requires_grad_(True)
        compiled(a, t).backward()
        _multilabel(ra, t).backward()
        torch.testing.assert_close(a.grad, ra.grad, msg=f"n={n}")
    assert compiled.stats.compiles == 1 and compiled.stats.eager_fallback_calls == 0
