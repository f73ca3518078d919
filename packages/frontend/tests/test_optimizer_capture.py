"""``ember.frontend.compile(optimizer.step)``: SGD, Adam and AdamW steps captured whole
(bytecode/optimizer_rules.py), against eager's parameters and state."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.runtime import config
from torch import nn
from torch.testing import assert_close

OPTIMIZERS: list[tuple[type[torch.optim.Optimizer], dict[str, Any]]] = [
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "foreach": False}),
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "foreach": True}),
    (torch.optim.Adam, {"lr": 1e-2, "foreach": False}),
    (torch.optim.Adam, {"lr": 1e-2, "foreach": True}),
    (torch.optim.AdamW, {"lr": 1e-2, "foreach": False}),
    (torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1, "foreach": True}),
]


def _model(device: str = "cpu") -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).to(device)


def _pair(opt: type[torch.optim.Optimizer], kw: dict[str, Any], device: str = "cpu",
          ) -> tuple[nn.Module, torch.optim.Optimizer, nn.Module, torch.optim.Optimizer]:
    model, ref = _model(device), _model(device)
    kw_ref: dict[str, Any] = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    return model, opt(model.parameters(), **kw), ref, opt(ref.parameters(), **kw_ref)


def _backward(model: nn.Module, x: torch.Tensor) -> None:
    model(x).square().sum().backward()


def _check_state(o: torch.optim.Optimizer, o_ref: torch.optim.Optimizer) -> None:
    for (p, state), (p_ref, state_ref) in zip(o.state.items(), o_ref.state.items()):
        assert_close(p, p_ref)
        assert sorted(state) == sorted(state_ref)
        for key in state:
            assert_close(state[key], state_ref[key])


def _run(opt: type[torch.optim.Optimizer], kw: dict[str, Any], steps: int = 4,
         device: str = "cpu", between: Callable[[nn.Module, nn.Module], None] | None = None,
         ) -> Any:
    model, o, ref, o_ref = _pair(opt, kw, device)
    step = ef.compile(o.step)
    for _ in range(steps):
        x = torch.randn(5, 8, device=device)
        _backward(model, x)
        _backward(ref, x)
        if between is not None:
            between(model, ref)
        step()
        o_ref.step()
        o.zero_grad()
        o_ref.zero_grad()
        _check_state(o, o_ref)
    for p, p_ref in zip(model.parameters(), ref.parameters()):
        assert_close(p, p_ref)
    return step


@pytest.mark.parametrize(("opt", "kw"), OPTIMIZERS,
                         ids=[f"{o.__name__}-foreach={k['foreach']}" for o, k in OPTIMIZERS])
def test_step_matches_eager_without_breaks(opt: type[torch.optim.Optimizer],
                                           kw: dict[str, Any]) -> None:
    step = _run(opt, kw)
    stats = step.stats
    # the first step makes the state (its own graph), later steps share the second
    assert (stats.graph_breaks, stats.compiles, stats.graphs) == (0, 2, 2)
    assert stats.fallbacks == 0


def test_plain_sgd_has_one_compile() -> None:
    stats = _run(torch.optim.SGD, {"lr": 0.1}).stats
    assert (stats.graph_breaks, stats.compiles) == (0, 1)


def _drop_last_grad(model: nn.Module, ref: nn.Module) -> None:
    for m in (model, ref):
        list(m.parameters())[-1].grad = None


@pytest.mark.parametrize("opt", [torch.optim.SGD, torch.optim.Adam])
def test_parameter_without_grad_is_skipped_as_in_eager(opt: type[torch.optim.Optimizer]
                                                       ) -> None:
    kw: dict[str, Any] = {"lr": 0.1, "momentum": 0.9} if opt is torch.optim.SGD else {}
    step = _run(opt, kw, between=_drop_last_grad)
    assert step.stats.graph_breaks == 0


def test_tensor_lr_changed_by_a_scheduler_does_not_recompile() -> None:
    model, o, ref, o_ref = _pair(torch.optim.Adam, {"lr": torch.tensor(0.01)})
    sched = torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5)
    sched_ref = torch.optim.lr_scheduler.StepLR(o_ref, step_size=1, gamma=0.5)
    step = ef.compile(o.step)
    for _ in range(5):
        x = torch.randn(5, 8)
        _backward(model, x)
        _backward(ref, x)
        step()
        o_ref.step()
        sched.step()
        sched_ref.step()
        o.zero_grad()
        o_ref.zero_grad()
    _check_state(o, o_ref)
    assert float(o.param_groups[0]["lr"]) == pytest.approx(0.01 / 32)
    assert (step.stats.compiles, step.stats.graph_breaks) == (2, 0)


def test_float_lr_change_is_a_guard_that_recompiles() -> None:
    model, o, ref, o_ref = _pair(torch.optim.SGD, {"lr": 0.1})
    step = ef.compile(o.step)
    for lr in (0.1, 0.1, 0.05):
        for group in (*o.param_groups, *o_ref.param_groups):
            group["lr"] = lr
        x = torch.randn(5, 8)
        _backward(model, x)
        _backward(ref, x)
        step()
        o_ref.step()
        o.zero_grad()
        o_ref.zero_grad()
    _check_state(o, o_ref)
    for p, p_ref in zip(model.parameters(), ref.parameters()):
        assert_close(p, p_ref)
    assert (step.stats.compiles, step.stats.recompiles) == (2, 1)


def test_whole_step_is_a_few_fused_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    # the steady step's wrapper: one kernel for the 4 step counts (horizontal), one per
    # parameter (its update, exp_avg and exp_avg_sq in one loop)
    model, o, _, _ = _pair(torch.optim.Adam, {"lr": 1e-2})
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    step = ef.compile(o.step)
    step()
    capsys.readouterr()
    with config.patch(logs="output_code"):
        step.reset()
        step()
    code = capsys.readouterr().err
    calls = re.findall(r"^    (kernel\d+)\(", code, re.MULTILINE)
    assert len(calls) == 5, code
    assert step.stats.graph_breaks == 0


@pytest.mark.parametrize(("opt", "kw"), [OPTIMIZERS[0], OPTIMIZERS[5]],
                         ids=["SGD", "AdamW-foreach"])
def test_triton_kernels_through_the_interpreter(opt: type[torch.optim.Optimizer],
                                                kw: dict[str, Any],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    # the GPU's code path (Triton kernels, run by Triton's interpreter) on the CPU
    from ember.inductor.codegen.triton.testing import triton_for_cpu

    with triton_for_cpu(), config.patch(logs="output_code"):
        step = _run(opt, kw, steps=3)
    code = capsys.readouterr().err
    assert "@triton.jit" in code
    assert step.stats.graph_breaks == 0


def _profiled(x: torch.Tensor) -> torch.Tensor:
    with torch.autograd.profiler.record_function("scaled"):
        y = x * 2
    return y + 1


def test_record_function_block_is_captured() -> None:
    fn = ef.compile(_profiled, backend="eager")
    x = torch.randn(3)
    assert_close(fn(x), x * 2 + 1)
    assert fn.stats.graph_breaks == 0


def _user_break(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    torch._dynamo.graph_break()
    return y + 1


def test_user_dynamo_graph_break_still_breaks() -> None:
    fn = ef.compile(_user_break, backend="eager")
    x = torch.randn(3)
    assert_close(fn(x), x * 2 + 1)
    assert fn.stats.graph_breaks == 1


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize(("opt", "kw"), OPTIMIZERS,
                         ids=[f"{o.__name__}-foreach={k['foreach']}" for o, k in OPTIMIZERS])
def test_step_matches_eager_on_cuda(opt: type[torch.optim.Optimizer], kw: dict[str, Any],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    with config.patch(logs=frozenset({"fallbacks"})):
        step = _run(opt, kw, device="cuda")
    assert step.stats.graph_breaks == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "[ember.fallbacks]" in line]
    if opt is torch.optim.SGD:
        assert step.stats.fallbacks == 0 and not lines, lines
        return
    # Adam's step counters stay on the CPU (capturable=False, torch's default): their new
    # values (one aten._foreach_add_ call) and the copies of them a graph returns run as
    # eager CPU calls, counted and logged; every op on the parameters is in a kernel
    assert step.stats.fallbacks == 2, lines
    assert lines and all("cpu" in line for line in lines), lines
    assert any("_foreach_add_" in line for line in lines), lines


def test_fused_step_breaks_and_says_why() -> None:
    step = _run(torch.optim.Adam, {"lr": 1e-2, "fused": True}, steps=2)
    assert step.stats.graph_breaks == 1
    assert "fused=True optimizer step" in step.breaks[0].reason


def test_deep_model_under_the_guards_fast_path() -> None:
    # 24 parameters: over 64 guards, so the check function gets its fast path; a grad
    # dropped at the fourth step must still be seen (a recompile, not a stale input)
    def deep() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(*(nn.Linear(16, 16) for _ in range(12)))

    model, ref = deep(), deep()
    o = torch.optim.Adam(model.parameters(), lr=1e-3)
    o_ref = torch.optim.Adam(ref.parameters(), lr=1e-3)
    step = ef.compile(o.step)
    for i in range(6):
        x = torch.randn(4, 16)
        _backward(model, x)
        _backward(ref, x)
        if i == 3:
            for m in (model, ref):
                next(m.parameters()).grad = None
        step()
        o_ref.step()
        o.zero_grad()
        o_ref.zero_grad()
        _check_state(o, o_ref)
    assert (step.stats.compiles, step.stats.graph_breaks) == (3, 0)


def test_aliasing_check_compares_only_inputs_sharing_storage(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the runtime's check that no input shares memory with one the step writes: an
    # optimizer writes hundreds of inputs, and comparing every pair cost 800 ms a step
    # at 100 parameters (ember.runtime.callable._check_input_aliasing)
    from ember.runtime import callable as runtime_callable

    model, o, _, _ = _pair(torch.optim.Adam, {"lr": 1e-2})
    step = ef.compile(o.step)
    x = torch.randn(5, 8)
    _backward(model, x)
    step()
    step()
    compared: list[int] = []
    real = runtime_callable.may_overlap

    def counted(a: torch.Tensor, b: torch.Tensor) -> bool:
        compared.append(1)
        return real(a, b)

    monkeypatch.setattr(runtime_callable, "may_overlap", counted)
    step()
    assert compared == []  # before: each written input against every other input
