"""``MyFunction.apply`` with gradients flowing is one operator of the graph whose backward
is the Function's own (``ember.frontend.function_ops``), on every backend: HF Bloom's
``GeLUFunction`` in training was a graph break per layer. What the operator cannot
stand for stays a break naming why."""

from __future__ import annotations

import copy
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.runtime.config import patch


class ScaledSquare(torch.autograd.Function):
    """Non-tensor arguments, a ctx attribute, a saved input; a backward that is not the
    forward's derivative (only the user's backward gives these gradients)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x * x * scale

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (x,) = ctx.saved_tensors
        return grad * 3.0 * x * ctx.scale, None


class TwoOutputs(torch.autograd.Function):
    """Two inputs, two outputs, an intermediate saved for backward, a tensor kept as a
    ctx attribute, ``needs_input_grad`` read."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        s = torch.sin(a)
        ctx.save_for_backward(s, b)
        ctx.a = a
        return s * b, a + b

    @staticmethod
    def backward(ctx: Any, g1: torch.Tensor, g2: torch.Tensor) -> tuple[Any, Any]:
        s, b = ctx.saved_tensors
        ga = g1 * b * 2.0 + g2 + ctx.a * 0.5 if ctx.needs_input_grad[0] else None
        gb = g1 * s + g2 * 4.0 if ctx.needs_input_grad[1] else None
        return ga, gb


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = ScaledSquare.apply(self.a(x), 0.5)
        p, q = TwoOutputs.apply(h, self.b(x))
        return (p * q).sum()


def _step(model: torch.nn.Module, fn: Any, x: torch.Tensor) -> tuple[Any, dict[str, Any]]:
    model.zero_grad(set_to_none=True)
    loss = fn(x)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("dynamic", [None, True])
def test_one_graph_with_the_users_backward(backend: str, dynamic: bool | None) -> None:
    torch.manual_seed(0)
    model = Net()
    ours = copy.deepcopy(model)
    compiled = ef.compile(ours, backend=backend, dynamic=dynamic, fullgraph=True)
    for rows in (3, 5):
        x = torch.randn(rows, 4)
        want_loss, want = _step(model, model, x)
        got_loss, got = _step(ours, compiled, x)
        torch.testing.assert_close(got_loss, want_loss)
        for name in want:
            torch.testing.assert_close(got[name], want[name], msg=name)
    assert compiled.stats.graph_breaks == 0


def test_a_repeated_call_is_a_cache_hit_and_not_stored_for_other_processes(
        capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(3, requires_grad=True)

    def fn(t: torch.Tensor) -> torch.Tensor:
        return ScaledSquare.apply(t, 2.0).sum()

    compiled = ef.compile(fn, backend="aot_eager")
    with patch(logs=frozenset({"cache"})):
        compiled(x).backward()
        compiled(x).backward()
    assert compiled.stats.compiles == 1 and compiled.stats.cache_hits == 1
    torch.testing.assert_close(x.grad, 2 * 3.0 * x.detach() * 2.0)
    err = capsys.readouterr().err
    assert "capture cache store" not in err


class ReturnsInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return -grad  # a gradient reversal layer


class HoldsAList(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.shapes = [x.shape]
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2


@pytest.mark.parametrize("function, why", [
    (ReturnsInput, "its forward returns an argument or a view of one"),
    (HoldsAList, "ctx.shapes holds a list"),
])
def test_what_the_operator_cannot_stand_for_stays_a_break(function: Any, why: str) -> None:
    def fn(t: torch.Tensor) -> torch.Tensor:
        return (function.apply(t * 1) * 3).sum()

    x1 = torch.randn(4, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    compiled = ef.compile(fn, backend="aot_eager")
    compiled(x2).backward()
    fn(x1).backward()
    torch.testing.assert_close(x2.grad, x1.grad)
    assert compiled.stats.graph_breaks == 1
    (info,) = compiled.breaks
    assert why in info.reason, info.reason


def test_hf_bloom_trains_in_one_graph() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BloomConfig(vocab_size=64, hidden_size=16, n_layer=2, n_head=2)
    model = transformers.BloomForCausalLM(config).train()
    ours = copy.deepcopy(model)
    compiled = ef.compile(ours, backend="aot_eager")
    ids = torch.randint(0, 64, (2, 6))
    model(input_ids=ids, labels=ids).loss.backward()
    compiled(input_ids=ids, labels=ids).loss.backward()
    for (name, p), q in zip(model.named_parameters(), ours.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)
    assert compiled.stats.graph_breaks == 0 and compiled.stats.graphs == 1


class SeparateSetup(torch.autograd.Function):
    """A forward without ctx and a ``setup_context``; a None saved for backward."""

    @staticmethod
    def forward(x: torch.Tensor, w: float) -> torch.Tensor:
        return x * w

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        x, w = inputs
        ctx.save_for_backward(x, None)
        ctx.w = w

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        x, nothing = ctx.saved_tensors
        assert nothing is None
        return grad * ctx.w * 2 + x * 0, None


def test_a_function_with_its_own_setup_context() -> None:
    def fn(t: torch.Tensor) -> torch.Tensor:
        return SeparateSetup.apply(t, 3.0).sum()

    x1 = torch.randn(4, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    compiled = ef.compile(fn, backend="aot_eager", fullgraph=True)
    compiled(x2).backward()
    fn(x1).backward()
    torch.testing.assert_close(x2.grad, x1.grad)
