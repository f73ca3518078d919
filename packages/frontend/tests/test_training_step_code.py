"""Code of training steps inside a compiled function (strict capture, eager backend):
``m.parameters()`` (a generator delegating with ``yield from``), ``clip_grad_norm_``
reading the parameters' gradients, ``GradScaler`` steps, ``torch.compiler.disable``,
and where a break inside torch code is reported.

Before: ``m.parameters()`` made the whole function run eagerly (``yield from`` was not
interpreted); ``clip_grad_norm_`` over parameters read without a source baked the first
call's gradients in as constants (later calls clipped nothing, silently); GradScaler's
``step`` ran on fake tensors, left fake tensors in the scaler's per-optimizer state and
crashed with DataDependentOutputException at the break; a ``torch.compiler.disable``
function was inlined (its side effects replayed, not run); breaks inside torch code named
torch's line, not the user's."""

from __future__ import annotations

import copy
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.runtime.config import patch
from torch import nn


def test_parameters_generator_is_captured_in_one_graph() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))

    def fn(x: torch.Tensor) -> torch.Tensor:
        return model(x).sum() + 0.1 * sum(p.pow(2).sum() for p in model.parameters())

    compiled = ef.compile(fn, backend="eager")
    x = torch.randn(2, 3)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), fn(x))
    assert compiled.stats.graph_breaks == 0 and compiled.stats.eager_fallback_calls == 0
    assert compiled.stats.graphs == 1


def test_yield_from_returns_the_delegates_value() -> None:
    def inner(x: torch.Tensor):  # type: ignore[no-untyped-def]
        yield x + 1
        yield x + 2
        return x * 10

    def outer(x: torch.Tensor):  # type: ignore[no-untyped-def]
        last = yield from inner(x)
        yield last
        yield from [x - 1, x - 2]

    def fn(x: torch.Tensor) -> list[torch.Tensor]:
        return list(outer(x))

    compiled = ef.compile(fn, backend="eager", fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), fn(x))


@pytest.mark.parametrize("as_list", [False, True])
def test_clip_grad_norm_clips_each_calls_gradients(as_list: bool) -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 4)

    def clip(m: nn.Module) -> torch.Tensor:
        params = list(m.parameters()) if as_list else m.parameters()
        return nn.utils.clip_grad_norm_(params, 0.1)

    compiled = ef.compile(clip, backend="eager")
    for _ in range(3):
        grads = [torch.randn_like(p) for p in model.parameters()]
        results = []
        for fn in (clip, compiled):
            for p, g in zip(model.parameters(), grads):
                p.grad = g.clone()
            norm = fn(model)
            results.append([norm, *(p.grad.clone() for p in model.parameters())])
        torch.testing.assert_close(results[1], results[0])
    assert compiled.stats.graph_breaks == 0


def _amp_step(model: nn.Module, opt: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
              x: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
    return loss


def test_grad_scaler_step_matches_eager(capsys: pytest.CaptureFixture[str]) -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    twin = copy.deepcopy(model)
    compiled = ef.compile(_amp_step, backend="eager")
    runs = []
    for m, fn in ((model, _amp_step), (twin, compiled)):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16, growth_interval=2)
        torch.manual_seed(1)
        run = []
        for i in range(6):
            x = torch.randn(2, 8) * (1e30 if i == 3 else 1)  # an inf step: scale backs off
            with patch(logs=frozenset({"graph_breaks"})):
                run.append((fn(m, opt, scaler, x).detach(), scaler.get_scale()))
        runs.append(run)
    torch.testing.assert_close(runs[1], runs[0])
    torch.testing.assert_close(list(twin.parameters()), list(model.parameters()))
    assert compiled.stats.recompiles <= 1  # the scaler's lazily made scale tensor
    err = capsys.readouterr().err
    # the .item() of GradScaler.step: the user's line, then where in torch
    assert "Tensor.item() needs the tensor's data\n  at " in err
    assert "    scaler.step(opt)\n  inside " in err and "grad_scaler.py" in err
    assert "Tensor.backward() runs autograd's backward pass" in err
    assert "DataDependentOutputException" not in err


calls: list[int] = []


@torch.compiler.disable
def _logged(x: torch.Tensor) -> torch.Tensor:
    calls.append(1)
    return x * 2


def test_torch_compiler_disable_runs_eagerly_at_a_break(
        capsys: pytest.CaptureFixture[str]) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return _logged(x + 1) - 1

    compiled = ef.compile(fn, backend="eager")
    calls.clear()
    x = torch.randn(3)
    with patch(logs=frozenset({"graph_breaks"})):
        for _ in range(3):
            torch.testing.assert_close(compiled(x), fn(x))
    assert len(calls) == 6
    assert compiled.stats.graph_breaks == 1 and compiled.stats.recompiles == 0
    assert "marked torch.compiler.disable" in capsys.readouterr().err


def test_zero_grad_is_captured_and_other_tensor_writes_named_for_the_user(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``p.grad = None`` (zero_grad's default) is a captured write, replayed after the
    graph (test_strict_grad_writes.py); another tensor attribute write is a graph break
    whose reason says what it is, not the interpreter's type name ("on a FakeTensor")."""
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(2, 3)).sum().backward()  # gradients for zero_grad to clear

    def step(x: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        return model(x).sum()

    compiled = ef.compile(step, backend="eager")
    compiled(torch.ones(2, 3))
    assert compiled.stats.graph_breaks == 0, compiled.stats
    assert all(p.grad is None for p in model.parameters())

    def freeze(x: torch.Tensor) -> torch.Tensor:
        model.weight.requires_grad = False
        return model(x).sum()

    with patch(logs=frozenset({"graph_breaks"})):
        ef.compile(freeze, backend="eager")(torch.ones(2, 3))
    model.weight.requires_grad_(True)
    err = capsys.readouterr().err
    assert "attribute write .requires_grad on a tensor: a tensor property" in err
    assert "FakeTensor" not in err


def _zero_with(how: str, model: nn.Module) -> None:
    if how == "module":
        model.zero_grad()
    elif how == "module_keep":
        model.zero_grad(set_to_none=False)
    else:
        for p in model.parameters():
            if p.grad is not None:
                p.grad.zero_()


@pytest.mark.parametrize("how", ["module", "module_keep", "loop"])
def test_a_step_zeroing_the_gradients_through_parameters_matches_eager(how: str) -> None:
    # module.parameters() reads each module's _parameters.items() in a lambda of torch's
    # own, run for real: the parameters came without a source, their .grad was read
    # unguarded and the zeroing was captured as a no-op (later calls kept accumulating)
    torch.manual_seed(0)
    eager_model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    ember_model = copy.deepcopy(eager_model)

    def step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        _zero_with(how, model)
        model(x).pow(2).mean().backward()
        return model[0].weight.grad.clone()

    compiled = ef.compile(step)
    for _ in range(3):
        x = torch.randn(5, 6)
        torch.testing.assert_close(compiled(ember_model, x), step(eager_model, x))
    for p, q in zip(ember_model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_zero_grad_after_backward_in_the_first_call() -> None:
    # the first call raised "compiled graph input arg1: expected a tensor, got NoneType"
    torch.manual_seed(0)
    model = nn.Linear(6, 3)

    def step(x: torch.Tensor) -> torch.Tensor:
        model(x).pow(2).mean().backward()
        grad = model.weight.grad.clone()
        model.zero_grad()
        return grad

    x = torch.randn(5, 6)
    want = step(x)
    compiled = ef.compile(step)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), want)
        assert model.weight.grad is None


def test_gradient_accumulation_keeping_the_first_loss_matches_eager() -> None:
    # the first loss, live across the second micro-batch, made the second segment's
    # compiled Function an autograd child of the first one: the second backward called
    # the first's (no gradient reaching it), which read its freed saved values and raised
    # "Trying to backward through the graph a second time"
    torch.manual_seed(0)
    eager_model = nn.Linear(6, 3)
    ember_model = copy.deepcopy(eager_model)

    def step(model: nn.Module, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        l1 = model(x1).pow(2).mean()
        l1.backward()
        l2 = model(x2).pow(2).mean()
        l2.backward()
        return l1.detach() + l2.detach()

    compiled = ef.compile(step)
    for _ in range(2):
        x1, x2 = torch.randn(5, 6), torch.randn(5, 6)
        torch.testing.assert_close(compiled(ember_model, x1, x2), step(eager_model, x1, x2))
        for p, q in zip(ember_model.parameters(), eager_model.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
            p.grad = q.grad = None


def test_a_zero_grad_kept_as_a_bound_method_is_guarded() -> None:
    # zg = opt.zero_grad kept in a closure: the optimizer was read nowhere else, so its
    # parameters' .grad were read unguarded and the zeroing was a no-op from the second
    # call on (method_guards.py)
    torch.manual_seed(0)
    models = [nn.Linear(6, 3)]
    models.append(copy.deepcopy(models[0]))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in models]

    def make(model: nn.Module, opt: torch.optim.Optimizer) -> Any:
        zg = opt.zero_grad

        def step(x: torch.Tensor) -> torch.Tensor:
            zg()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            return loss.detach()

        return step

    compiled, eager = ef.compile(make(models[0], opts[0])), make(models[1], opts[1])
    for _ in range(4):
        x = torch.randn(5, 6)
        torch.testing.assert_close(compiled(x), eager(x))
    for p, q in zip(*(m.parameters() for m in models)):
        torch.testing.assert_close(p, q)
