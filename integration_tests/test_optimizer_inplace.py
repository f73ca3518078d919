"""``ember.frontend.compile(opt.step)`` writes the parameters and the optimizer state in
place (issue 19 item 4): the generated kernels store the new values into the inputs'
memory, so the runtime copies nothing back (``ember_testing.copies.CopyCounter``), and
the values match eager's step. Also a plain ``x.add_(1)`` graph through the frontend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember_testing.copies import CopyCounter
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

OPTIMIZERS: dict[str, tuple[type[torch.optim.Optimizer], dict[str, Any]]] = {
    "sgd_momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "foreach": False}),
    "adam": (torch.optim.Adam, {"lr": 1e-2, "foreach": False}),
    "adamw_foreach": (torch.optim.AdamW, {"lr": 1e-2, "foreach": True}),
}


def _model(device: str = "cpu") -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 8)).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    return model


def _steps(name: str, device: str = "cpu") -> tuple[list[int], nn.Module, nn.Module]:
    """Three steps of eager and of the compiled step; the copies each compiled step made."""
    cls, kwargs = OPTIMIZERS[name]
    eager_model, ember_model = _model(device), _model(device)
    eager = cls(eager_model.parameters(), **kwargs)
    opt = cls(ember_model.parameters(), **kwargs)
    step: Callable[[], Any] = ef.compile(opt.step)
    copies = []
    for _ in range(3):
        eager.step()
        with CopyCounter() as counter:
            step()
        copies.append(counter.count)
    for a, b in zip(eager_model.parameters(), ember_model.parameters()):
        torch.testing.assert_close(b, a)
    for a, b in zip(eager.state.values(), opt.state.values()):
        for key in a:
            torch.testing.assert_close(b[key], a[key])
    return copies, eager_model, ember_model


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_an_optimizer_step_copies_nothing_back(name: str) -> None:
    copies, _, _ = _steps(name)
    # the first step makes the state (its own graph); every step writes in place
    assert copies == [0, 0, 0]


def test_an_in_place_add_through_the_frontend_copies_nothing() -> None:
    @ef.compile
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return y * 2

    x, y = torch.randn(64), torch.randn(64)
    want_x, want_out = x + 1, y * 2
    f(x.clone(), y)  # compile
    with CopyCounter() as counter:
        out = f(x, y)
    assert counter.count == 0
    torch.testing.assert_close(x, want_x)
    torch.testing.assert_close(out, want_out)


def test_a_mutated_input_saved_for_backward_fails_the_version_check() -> None:
    # eager raises when a tensor saved for the backward is modified in place; the
    # compiled in-place write bumps the version counter so autograd raises the same way
    @ef.compile
    def bump(x: torch.Tensor) -> None:
        x.mul_(2)

    w = torch.randn(8, requires_grad=True)
    x = torch.randn(8)
    bump(x.clone())  # compile
    loss = (w * x).sum()  # saves x for the gradient of w
    bump(x)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()  # type: ignore[no-untyped-call]


class _CudaCopies(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts ``aten::copy_`` calls into CUDA tensors and host-to-device transfers
    (``_to_copy`` of a CPU tensor onto the GPU) (the optimizer's ``step`` counters stay
    on the CPU, not capturable: the kernels take their values as arguments, their new
    values are computed on the CPU and copied back there)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.copy_.default and args[0].is_cuda:
            self.count += 1
        elif (func in (torch.ops.aten._to_copy.default, torch.ops.aten.lift_fresh_copy.default)
              and isinstance(result, torch.Tensor) and result.is_cuda
              and isinstance(args[0], torch.Tensor) and not args[0].is_cuda):
            self.count += 1
        return result


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_an_adamw_step_on_cuda_writes_in_place() -> None:
    cls, kwargs = OPTIMIZERS["adamw_foreach"]
    eager_model, ember_model = _model("cuda"), _model("cuda")
    eager = cls(eager_model.parameters(), **kwargs)
    opt = cls(ember_model.parameters(), **kwargs)
    step: Callable[[], Any] = ef.compile(opt.step)
    copies = []
    for _ in range(3):
        eager.step()
        with _CudaCopies() as counter:
            step()
        copies.append(counter.count)
    torch.cuda.synchronize()
    for a, b in zip(eager_model.parameters(), ember_model.parameters()):
        torch.testing.assert_close(b, a)
    for a, b in zip(eager.state.values(), opt.state.values()):
        for key in a:  # the device of ``step``: the test below
            torch.testing.assert_close(b[key], a[key], check_device=False)
    # NOTE: the first step (it makes the state) copied 4 times into CUDA tensors on the
    # H200 (session 19); every later step writes in place: the CPU step counters reach
    # the kernels as scalar arguments (lowering/host_scalars.py; session 20: [0, 1, 1]
    # before, a kernel re-read an exp_avg after another had computed its new value)
    assert copies[1:] == [0, 0], copies


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_a_steady_state_adamw_step_on_cuda_launches_a_kernel_per_parameter_shape() -> None:
    # four parameter shapes ([16, 16], [16], [8, 16], [8]): four Triton kernels, each
    # updating its parameters and state whole, no eager CUDA op, no host-to-device copy
    # (integration_tests/test_optimizer_cuda_program.py: the same, from the code)
    from torch.profiler import DeviceType, ProfilerActivity, profile

    cls, kwargs = OPTIMIZERS["adamw_foreach"]
    model = _model("cuda")
    opt = cls(model.parameters(), **kwargs)
    step: Callable[[], Any] = ef.compile(opt.step)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    gpu = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    names = sorted({e.name for e in gpu})
    assert not [n for n in names if "Memcpy" in n], names
    assert len(gpu) == 4, names


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_a_compiled_adamw_step_keeps_the_state_on_eager_devices() -> None:
    """The first step's ``state['step']`` is a cpu constant the cuda graph returns (folded
    from ``torch.tensor(0.0) + 1``): it was copied by a cuda kernel, onto the GPU, before
    ``lowering.devices.copy_on_own_device`` (tools/gpu/debug_optimizer_state.py)."""
    cls, kwargs = OPTIMIZERS["adamw_foreach"]
    eager_model, ember_model = _model("cuda"), _model("cuda")
    eager = cls(eager_model.parameters(), **kwargs)
    opt = cls(ember_model.parameters(), **kwargs)
    eager.step()
    ef.compile(opt.step)()
    for a, b in zip(eager.state.values(), opt.state.values()):
        assert {k: v.device for k, v in b.items()} == {k: v.device for k, v in a.items()}
