"""Grad mode inside and around a Dynamo graph (``torch.compile(backend="ember")``):
Dynamo writes ``torch.no_grad()`` / ``torch.enable_grad()`` blocks as
``torch._C._set_grad_enabled`` calls in its graph, and recompiles a graph for each grad
mode it is called under."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from ember.runtime import dynamo_backend
from ember.runtime.config import patch
from torch import nn


@pytest.fixture(autouse=True)
def _fresh_dynamo(tmp_path: Path) -> Iterator[None]:
    torch.compiler.reset()
    # the program cache on (the test session turns it off): a hit must be the right one
    with patch(cache_dir=tmp_path, cache_enabled=True, program_cache=True):
        yield
    torch.compiler.reset()


def _buffer_step(b: torch.Tensor, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        b.add_(w)
    return (w * x).sum()


def test_an_input_written_under_no_grad_takes_no_history() -> None:
    compiled = torch.compile(_buffer_step, backend="ember")
    b, w = torch.zeros(3), torch.ones(3, requires_grad=True)
    compiled(b, w, torch.full((3,), 2.0)).backward()
    assert not b.requires_grad and b.grad_fn is None
    torch.testing.assert_close(b, torch.ones(3))
    torch.testing.assert_close(w.grad, torch.full((3,), 2.0))


class _Ema(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("ema", torch.zeros(3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.ema.mul_(0.9).add_(self.lin.weight, alpha=0.1)
        out: torch.Tensor = self.lin(x)
        return out


def test_a_buffer_updated_under_no_grad_from_a_weight_trains_step_after_step() -> None:
    # the buffer's new value carried the weight's history: the second step's backward
    # raised "Trying to backward through the graph a second time"
    torch.manual_seed(0)
    model, reference = _Ema(), _Ema()
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="ember")
    x = torch.randn(2, 3)
    for _ in range(3):
        compiled(x).sum().backward()
        reference(x).sum().backward()
    assert not model.ema.requires_grad
    torch.testing.assert_close(model.ema, reference.ema)
    torch.testing.assert_close(model.lin.weight.grad, reference.lin.weight.grad)


def _padded(x: torch.Tensor) -> torch.Tensor:
    return F.pad(x, (1, 2, 1, 2), value=3.0)


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_graph_compiled_under_no_grad_then_with_grad_gets_a_backward(
        dynamic: bool | None) -> None:
    # one program text, two grad modes: the program cache served the inference
    # program to the training call (grad mode was not in the key)
    compiled = torch.compile(_padded, backend="ember", dynamic=dynamic)
    x = torch.randn(2, 3, 5, 6, requires_grad=True)
    with torch.no_grad():
        assert not compiled(x).requires_grad
    y = compiled(x)
    assert y.requires_grad
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.ones_like(x))


def _grad_inside(x: torch.Tensor) -> torch.Tensor:
    with torch.enable_grad():
        y = x * 2
    return y


def test_a_graph_that_turns_grad_on_under_no_grad_runs_eagerly() -> None:
    compiled = torch.compile(_grad_inside, backend="ember")
    x = torch.randn(4, requires_grad=True)
    before = sum(dynamo_backend.eager_graphs.values())
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        y = compiled(x)
    assert sum(dynamo_backend.eager_graphs.values()) == before + 1
    assert any(issubclass(w.category, dynamo_backend.EagerGraphWarning)
               and "enable_grad" in str(w.message) for w in caught)
    assert y.requires_grad
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4,), 2.0))
    # with grad mode on around it, the same function compiles (no eager graph)
    x.grad = None
    compiled(x).sum().backward()
    assert sum(dynamo_backend.eager_graphs.values()) == before + 1
    torch.testing.assert_close(x.grad, torch.full((4,), 2.0))


def test_a_gradient_hook_on_a_value_of_the_graph_runs_eagerly() -> None:
    # Dynamo's higher_order.register_hook: Ember's backward did not call the hook (the
    # gradients upstream of it were half of eager's, silently)
    torch.manual_seed(0)
    lin1, lin2 = nn.Linear(6, 12), nn.Linear(12, 3)

    def f(x: torch.Tensor) -> torch.Tensor:
        h = lin1(x)
        h.register_hook(lambda g: g * 2)
        out: torch.Tensor = lin2(torch.tanh(h)).sum()
        return out

    x = torch.randn(5, 6)
    f(x).backward()
    want = lin1.weight.grad.clone()
    lin1.zero_grad()
    before = sum(dynamo_backend.eager_graphs.values())
    with pytest.warns(dynamo_backend.EagerGraphWarning, match="register_hook"):
        torch.compile(f, backend="ember")(x).backward()
    assert sum(dynamo_backend.eager_graphs.values()) == before + 1
    torch.testing.assert_close(lin1.weight.grad, want)


class _ReversedGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return -3 * grad


def test_a_custom_autograd_function_runs_eagerly_with_its_backward() -> None:
    # Dynamo's higher_order.autograd_function_apply: Ember differentiated the forward
    # (a clone) instead of running the backward (gradients of the wrong sign, silently)
    torch.manual_seed(0)
    lin = nn.Linear(4, 3)

    def f(x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = _ReversedGradient.apply(lin(x)).pow(2).sum()
        return out

    x = torch.randn(5, 4)
    f(x).backward()
    want = lin.weight.grad.clone()
    lin.zero_grad()
    before = sum(dynamo_backend.eager_graphs.values())
    with pytest.warns(dynamo_backend.EagerGraphWarning, match="custom torch.autograd.Function"):
        torch.compile(f, backend="ember")(x).backward()
    assert sum(dynamo_backend.eager_graphs.values()) == before + 1
    torch.testing.assert_close(lin.weight.grad, want)


def test_a_higher_order_operator_ember_does_not_record_runs_eagerly_named() -> None:
    # torch.cond failed inside the recorder with an error about its dispatch mode
    def f(x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(),
                                       (x,))
        return out

    compiled = torch.compile(f, backend="ember")
    with pytest.warns(dynamo_backend.EagerGraphWarning, match=r"torch\.ops\.higher_order\.cond"):
        for x in (torch.ones(3), -torch.ones(3)):
            torch.testing.assert_close(compiled(x), f(x))


def test_a_backward_inside_the_compiled_step_is_not_traced_by_dynamo() -> None:
    """``loss.backward()`` inside a compiled step runs Ember's backward while Dynamo's
    frame hook is set on the thread: Dynamo traced Ember's own code (the backward glue,
    the backward graph's compile) and warned dozens of times about it."""
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    reference = copy.deepcopy(model)

    def step(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        loss = m(x).sum()
        loss.backward()
        return loss

    compiled = torch.compile(step, backend="ember")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            x = torch.randn(4, 8)
            torch.testing.assert_close(compiled(model, x), step(reference, x))
    assert [str(w.message) for w in caught if "ember" in str(w.message)] == []
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_a_compiled_module_under_checkpoint_compiles_outside_its_hooks() -> None:
    """``checkpoint(torch.compile(m, backend="ember"), x, use_reentrant=False)``: the
    compile runs inside the first forward, whose saved-tensor hooks counted the tensors
    the recording saved (CheckpointError: a different number of tensors saved during the
    original forward and the recomputation)."""
    import torch.utils.checkpoint as cp

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    x = torch.randn(3, 4, requires_grad=True)
    cp.checkpoint(torch.compile(m, backend="ember"), x, use_reentrant=False).sum().backward()
    got = m[0].weight.grad.clone()
    m.zero_grad()
    m(x).sum().backward()
    torch.testing.assert_close(got, m[0].weight.grad)


@pytest.mark.parametrize("capture", ["strict", "trace"])
def test_an_ember_compiled_module_under_checkpoint_records_outside_its_hooks(
        capture: str) -> None:
    """``checkpoint(ember.frontend.compile(m), x, use_reentrant=False)``: the first
    forward compiles, and the checkpoint's hooks counted the tensors the recording saved
    (CheckpointError at the recomputation: it failed after a Dynamo reset)."""
    import ember.frontend as ef
    import torch.utils.checkpoint as cp

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    x = torch.randn(3, 4, requires_grad=True)
    compiled = ef.compile(m, options={"capture": capture})
    cp.checkpoint(compiled, x, use_reentrant=False).sum().backward()
    got = m[0].weight.grad.clone()
    m.zero_grad()
    m(x).sum().backward()
    torch.testing.assert_close(got, m[0].weight.grad)
