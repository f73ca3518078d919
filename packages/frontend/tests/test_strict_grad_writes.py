"""``p.grad = v`` / ``p.grad = None`` / ``del p.grad`` on a graph input in strict
capture: a recorded side effect replayed after the graph (bytecode/attributes.py
``_store_grad``), not a graph break; compared with eager."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from strict_helpers import strict
from torch import nn
from torch.testing import assert_close


def _param(grad: bool = True) -> nn.Parameter:
    torch.manual_seed(0)
    p = nn.Parameter(torch.randn(3))
    if grad:
        p.grad = torch.ones(3)
    return p


def _stats(compiled: Any, graphs: int, breaks: int) -> None:
    assert (compiled.stats.graphs, compiled.stats.graph_breaks) == (graphs, breaks), \
        compiled.stats


def test_set_to_none_is_captured_and_read_back() -> None:
    def fn(p: torch.Tensor, x: torch.Tensor) -> Any:
        p.grad = None
        if p.grad is None:
            return x + 1
        return x - 1

    compiled = strict(fn)
    for _ in range(2):
        p, q = _param(), _param()
        assert_close(compiled(q, torch.ones(3)), fn(p, torch.ones(3)))
        assert q.grad is None and p.grad is None
    _stats(compiled, 1, 0)


def test_del_grad_and_setattr() -> None:
    def fn(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        del p.grad
        setattr(q, "grad", x * 3)
        return x * 2

    compiled = strict(fn)
    p, q = _param(), _param()
    assert_close(compiled(p, q, torch.ones(3)), torch.full((3,), 2.0))
    assert p.grad is None
    assert_close(q.grad, torch.full((3,), 3.0))
    _stats(compiled, 1, 0)


def test_computed_gradient_is_the_graph_output() -> None:
    def fn(p: torch.Tensor, x: torch.Tensor) -> Any:
        old = p.grad
        p.grad = x * 2 + old
        p.grad.mul_(3)  # later reads (and in-place writes) see the new gradient
        return p.grad, old

    compiled = strict(fn)
    for _ in range(2):
        p, q = _param(), _param()
        expected, expected_old = fn(p, torch.ones(3))
        got, got_old = compiled(q, torch.ones(3))
        assert_close(got, expected)
        assert_close(got_old, expected_old)
        assert got is q.grad  # the returned tensor is the gradient, as in eager
        assert got_old is not q.grad
        assert_close(q.grad, p.grad)
    _stats(compiled, 1, 0)


def test_input_tensor_is_handed_over() -> None:
    def fn(p: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        p.grad = g
        return g.sum()

    compiled = strict(fn)
    p, g = _param(grad=False), torch.randn(3)
    compiled(p, g)
    assert p.grad is g
    _stats(compiled, 1, 0)


def test_none_then_reset_in_one_call() -> None:
    def fn(p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        p.grad = None
        y = x.sin()
        p.grad = y
        return y.cos()

    compiled = strict(fn)
    p, q = _param(), _param()
    assert_close(compiled(q, torch.ones(3)), fn(p, torch.ones(3)))
    assert_close(q.grad, p.grad)
    _stats(compiled, 1, 0)


@pytest.mark.parametrize("value", ["dtype", "size", "not_tensor"])
def test_write_eager_refuses_breaks_and_raises(value: str) -> None:
    def fn(p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        if value == "dtype":
            p.grad = y.double()
        elif value == "size":
            p.grad = y[:2]
        else:
            p.grad = 1.0  # type: ignore[assignment]
        return y

    compiled = strict(fn)
    with pytest.raises((RuntimeError, TypeError)) as eager:
        fn(_param(), torch.ones(3))
    with pytest.raises(type(eager.value)):
        compiled(_param(), torch.ones(3))
    assert compiled.stats.graph_breaks == 1, compiled.stats


def test_grad_of_a_tensor_made_inside_is_captured() -> None:
    # before: a break ("setting .grad of a tensor made inside the compiled function")
    def fn(x: torch.Tensor) -> Any:
        t = x * 2
        t.grad = None
        kept = t.grad
        t.grad = torch.ones_like(t)
        g = t.grad * 3
        return t + 1, g, kept, t

    compiled = strict(fn)
    for _ in range(2):
        got, expected = compiled(torch.ones(3)), fn(torch.ones(3))
        for a, b in zip(got[:2], expected[:2]):
            assert_close(a, b)
        assert got[2] is None and expected[2] is None
        assert_close(got[3].grad, expected[3].grad)  # replayed on the returned tensor
    _stats(compiled, 1, 0)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=True),
])
def test_training_step_with_zero_grad_set_to_none(make_opt: Any) -> None:
    def train_step(model: nn.Module, opt: torch.optim.Optimizer,
                   x: torch.Tensor) -> torch.Tensor:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    eager_model, ember_model = _model(), _model()
    eager_opt, ember_opt = make_opt(eager_model.parameters()), make_opt(ember_model.parameters())
    compiled = strict(train_step)
    torch.manual_seed(1)
    for _ in range(3):
        x = torch.randn(5, 8)
        assert_close(compiled(ember_model, ember_opt, x), train_step(eager_model, eager_opt, x))
        assert all(p.grad is None for p in ember_model.parameters())
    for p, q in zip(ember_model.parameters(), eager_model.parameters()):
        assert_close(p, q)
    # backward() is the one break: the forward is one graph, the optimizer step and
    # zero_grad another (captured twice: the first step creates the optimizer's state)
    _stats(compiled, 3, 1)


def test_compiled_step_then_zero_grad_in_one_function() -> None:
    model, ref = _model(), copy.deepcopy(_model())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)

    def step_and_clear(o: torch.optim.Optimizer) -> None:
        o.step()
        o.zero_grad()  # set_to_none=True, torch's default

    compiled = strict(step_and_clear)
    torch.manual_seed(2)
    for _ in range(3):
        x = torch.randn(5, 8)
        model(x).square().sum().backward()
        ref(x).square().sum().backward()
        compiled(opt)
        step_and_clear(ref_opt)
        assert all(p.grad is None for p in model.parameters())
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p, q)
    _stats(compiled, 2, 0)  # the first step creates the optimizer's state


@pytest.mark.parametrize("foreach", [False, True])
def test_torch_code_run_on_the_fakes_sees_the_written_grad(foreach: bool) -> None:
    """``clip_grad_norm_`` is torch code the capture runs for real on the fakes: it reads
    the fake's own ``.grad``, which must hold the captured write (it read None: norm 0)."""
    def fn(w: torch.Tensor, g: torch.Tensor) -> Any:
        w.grad = g * 2
        norm = torch.nn.utils.clip_grad_norm_([w], max_norm=1.0, foreach=foreach)
        clipped = w.grad.clone()
        w.grad = None
        return norm, clipped

    compiled = strict(fn)
    for seed in range(2):
        torch.manual_seed(seed)
        w, g = torch.randn(5, requires_grad=True), torch.randn(5) * 3
        w2 = w.detach().clone().requires_grad_()
        assert_close(compiled(w2, g.clone()), fn(w, g.clone()))
        assert w2.grad is None and w.grad is None
    _stats(compiled, 1, 0)
