"""In-place ops that write a list of tensors (``_foreach_*_``) and torch's AMP ops
(``_amp_update_scale_``, ``_amp_foreach_non_finite_check_and_unscale_``) functionalize:
``clip_grad_norm_(foreach=True)`` and a ``GradScaler`` training step compiled with the
``aot_eager`` and ``inductor`` backends match eager (values, tensors written in place,
the scale over several steps, an inf step among them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import pytest
import torch
from torch import nn

BACKENDS = ["aot_eager", "inductor"]


def _compare(fn: Callable[..., Any], backend: str, *inputs: torch.Tensor) -> None:
    eager_in = [t.clone() for t in inputs]
    ember_in = [t.clone() for t in inputs]
    expected = fn(*eager_in)
    got = ef.compile(fn, backend=backend)(*ember_in)
    torch.testing.assert_close(got, expected, equal_nan=True)
    for a, b in zip(ember_in, eager_in):
        torch.testing.assert_close(a, b, equal_nan=True)  # written in place


def _foreach_mul(a: torch.Tensor, b: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    torch._foreach_mul_([a, b], s)
    return a + b


def _foreach_mixed(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    torch._foreach_add_([a, b], [c, c], alpha=0.5)
    torch._foreach_addcmul_([a, b], [c, b], [c, c], value=2.0)
    torch._foreach_div_([a, c], 3.0)
    torch._foreach_copy_([c], [b])
    torch._foreach_zero_([b[1:]])  # a view: written back into b
    return a * 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_foreach_mul, _foreach_mixed], ids=["mul", "mixed"])
def test_foreach_inplace_ops(fn: Callable[..., Any], backend: str) -> None:
    torch.manual_seed(0)
    _compare(fn, backend, torch.randn(3), torch.randn(3), torch.tensor(2.0)
             if fn is _foreach_mul else torch.randn(3))


def _clip(w1: torch.Tensor, w2: torch.Tensor, g1: torch.Tensor,
          g2: torch.Tensor) -> torch.Tensor:
    w1.grad, w2.grad = g1, g2
    norm = torch.nn.utils.clip_grad_norm_([w1, w2], max_norm=1.0, foreach=True)
    w1.grad = w2.grad = None
    return norm


@pytest.mark.parametrize("backend", BACKENDS)
def test_clip_grad_norm_foreach(backend: str) -> None:
    torch.manual_seed(0)
    w1, w2 = torch.randn(4, 3), torch.randn(5)
    g1, g2 = torch.randn(4, 3) * 3, torch.randn(5) * 3
    _compare(_clip, backend, w1, w2, g1, g2)


def _update_scale(s: torch.Tensor, tracker: torch.Tensor,
                  found: torch.Tensor) -> tuple[torch.Tensor, ...]:
    out = torch._amp_update_scale_(s, tracker, found, 2.0, 0.5, 2)
    return out * 1, tracker + 0


def _unscale(g1: torch.Tensor, g2: torch.Tensor, found: torch.Tensor,
             inv: torch.Tensor) -> torch.Tensor:
    torch._amp_foreach_non_finite_check_and_unscale_([g1, g2], found, inv)
    return g1.sum() + found


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tracker,found", [(0, 0.0), (1, 0.0), (1, 1.0)])
def test_amp_update_scale(backend: str, tracker: int, found: float) -> None:
    _compare(_update_scale, backend, torch.tensor(4.0),
             torch.tensor(tracker, dtype=torch.int32), torch.tensor(found))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [None, float("inf"), float("nan")])
def test_amp_unscale(backend: str, bad: float | None) -> None:
    torch.manual_seed(0)
    g1, g2 = torch.randn(4), torch.randn(2, 3)
    if bad is not None:
        g2[1, 1] = bad
    _compare(_unscale, backend, g1, g2, torch.tensor(0.0), torch.tensor(0.25))


def _scaler_run(backend: str | None) -> tuple[list[float], list[torch.Tensor]]:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=2)

    def step(x: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = model(x).square().sum()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        return loss.detach()

    run = step if backend is None else ef.compile(step, backend=backend)
    scales = []
    for i in range(6):
        x = torch.full((3, 4), float("inf")) if i == 3 else torch.randn(3, 4)
        run(x)
        scales.append(scaler.get_scale())
    return scales, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_scaler_training_step(backend: str) -> None:
    eager_scales, eager_params = _scaler_run(None)
    scales, params = _scaler_run(backend)
    assert scales == eager_scales
    assert eager_scales[1] > eager_scales[0] and eager_scales[3] < eager_scales[2]
    for a, b in zip(params, eager_params):
        torch.testing.assert_close(a, b)
