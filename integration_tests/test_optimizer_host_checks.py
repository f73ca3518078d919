"""A compiled AdamW(foreach) step's per-call checks (issue 19, host time): the frontend's
tensor guards in one batch (``guard_batch.py``), the wrapper's input tests behind the
runtime's input stamp, the aliasing check's stamp (``ember.runtime.input_stamp``) and,
on CUDA, the CPU step counters written by one foreach call. The step must still match
eager's, every stamp must answer the steady-state calls, and inputs that alias must
still be refused once they do.

On CUDA (``pytest -m cuda integration_tests/test_optimizer_host_checks.py -s``) it also
prints the host time of one compiled step against eager's."""

from __future__ import annotations

import time
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.frontend.guard_batch import TensorBatch
from ember.runtime.callable import ProgramCallable
from torch import nn

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[
        pytest.mark.cuda,
        pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]),
]


def _optimizer(device: str) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(16, 16) for _ in range(6))).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    opt.step()  # the state exists: the captured step is the steady-state one
    return model, opt


def _segment(step: Any) -> Any:
    (segment,) = step.segments[0]
    return segment


def _batches(matcher: Any) -> list[TensorBatch]:
    found = [v for v in matcher.__globals__.values() if isinstance(v, TensorBatch)]
    for cell in matcher.__closure__ or ():  # the fast path's wrapper holds the function
        if isinstance(cell.cell_contents, list):
            for fn in cell.cell_contents:
                found += [v for v in getattr(fn, "__globals__", {}).values()
                          if isinstance(v, TensorBatch)]
    return found


@pytest.mark.parametrize("device", DEVICES)
def test_the_compiled_step_matches_eager_with_every_stamp_answering(device: str) -> None:
    eager_model, eager_opt = _optimizer(device)
    model, opt = _optimizer(device)
    step = ef.compile(opt.step)
    for _ in range(5):
        eager_opt.step()
        step()
    for p, q in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(p, q)
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(opt.state[p][key], eager_opt.state[q][key])
    segment = _segment(step)
    runner = segment.runner
    assert isinstance(runner, ProgramCallable)
    assert runner._disjoint.stamp.hits >= 3  # the aliasing check's sort skipped
    (batch,) = _batches(segment._matcher)
    assert batch.hits >= 2  # the frontend's tensor guards in one C++ check
    wrapper = runner.program.files["forward/wrapper.py"].decode()
    assert "_inputs.holds(" in wrapper, wrapper
    if device == "cuda":  # the cpu step counters: one foreach call, not 12 add.out
        assert "aten._foreach_add_.Scalar(" in wrapper and "aten.add.out(" not in wrapper


@pytest.mark.parametrize("device", DEVICES)
def test_inputs_that_alias_are_refused_after_the_stamps_answered(device: str) -> None:
    _, opt = _optimizer(device)
    step = ef.compile(opt.step)
    for _ in range(4):
        step()
    segment = _segment(step)
    state = step._entry_state(step._bound, {})
    inputs = segment.match(state, step._ctx)
    assert inputs is not None
    # two parameters of one shape: the second replaced by the first (the program writes
    # both: they would be updated twice)
    shapes = [tuple(t.shape) for t in inputs]
    i = shapes.index((16, 16))
    j = shapes.index((16, 16), i + 1)
    aliased = list(inputs)
    aliased[j] = aliased[i]
    with pytest.raises(RuntimeError, match="shares memory with input"):
        segment.runner(aliased)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_host_time_of_the_compiled_step_on_cuda() -> None:
    _, opt = _optimizer("cuda")
    step = ef.compile(opt.step)
    for _ in range(5):
        step()

    def host_us(fn: Any, n: int = 200) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start  # launches only: the GPU may lag behind
        torch.cuda.synchronize()
        return elapsed / n * 1e6

    print(f"\nhost us per step: eager {host_us(opt.step):.0f}, ember {host_us(step):.0f}")
