"""The direct launch of a compiled Triton binary (``triton_kernel.binary_launch``): the
call Triton's own ``CompiledKernel[grid](*args)`` makes, bound once, used only where this
Triton's runner is written that way and no launch hook is installed."""

from __future__ import annotations

from typing import Any

import pytest
import torch

triton = pytest.importorskip("triton")

from ember.runtime.compiled import triton_kernel  # noqa: E402
from ember.runtime.compiled.triton_kernel import binary_launch  # noqa: E402


class _Driver:
    def get_current_device(self) -> int:
        return 3

    def get_current_stream(self, device: int) -> str:
        return f"stream-of-{device}"


class _DirectKernel:
    """Shaped like Triton's CompiledKernel: its runner is the thin wrapper."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.runner_calls: list[tuple[Any, ...]] = []
        self.function, self.packed_metadata = "fn", "packed"

    @property
    def run(self) -> Any:
        return lambda *a: self.calls.append(a)

    def __getitem__(self, grid: Any) -> Any:
        def runner(*args: Any, stream: Any = None) -> None:
            self.runner_calls.append((grid, *args))
            launch_metadata = None
            self.run(grid[0], grid[1], grid[2], stream, self.function, self.packed_metadata, launch_metadata,
                     None, None, *args)
        return runner


class _OtherKernel(_DirectKernel):
    def __getitem__(self, grid: Any) -> Any:  # a runner that does something else
        def runner(*args: Any, stream: Any = None) -> None:
            self.runner_calls.append((grid, *args))
        return runner


@pytest.fixture
def fake_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    from triton.runtime import driver

    monkeypatch.setattr(driver, "_active", _Driver())


def test_this_tritons_runner_is_recognised_as_direct() -> None:
    from triton.compiler.compiler import CompiledKernel

    # on the GPU machine the fast path is taken with this Triton's binaries
    assert triton_kernel._runner_is_direct(CompiledKernel)


def test_direct_launch_calls_run_with_the_runners_arguments(fake_driver: None) -> None:
    kernel = _DirectKernel()
    launch = binary_launch(kernel, (64,))
    launch((4, 2, 1), ("x", 7))
    assert kernel.calls == [(4, 2, 1, "stream-of-3", "fn", "packed", None, None, None, "x", 7, 64)]
    assert kernel.runner_calls == []


def test_a_launch_hook_goes_through_the_runner(fake_driver: None,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = _DirectKernel()
    launch = binary_launch(kernel, ())
    hook = triton.knobs.runtime.launch_enter_hook
    if hasattr(hook, "add"):  # a hook chain (newer Tritons): empty by default
        monkeypatch.setattr(hook, "calls", [lambda *a: None])
    else:
        monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", lambda *a: None)
    launch((1, 1, 1), ("x",))
    assert kernel.runner_calls == [((1, 1, 1), "x")]


def test_a_different_runner_is_kept(fake_driver: None) -> None:
    kernel = _OtherKernel()
    launch = binary_launch(kernel, (8,))
    launch((2, 1, 1), ("y",))
    assert kernel.runner_calls == [((2, 1, 1), "y", 8)] and kernel.calls == []


@pytest.mark.cuda
def test_generated_kernel_launches_directly_on_cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from ember.runtime.compiled.triton_kernel import TritonKernelSpec, load_triton_kernel

    source = (
        "import triton\nimport triton.language as tl\n\n@triton.jit\n"
        "def add_one(x, y, n, BLOCK: tl.constexpr):\n"
        "    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(y + i, tl.load(x + i, mask=i < n) + 1, mask=i < n)\n"
    )
    spec = TritonKernelSpec("add_one", source, {"x": "*fp32", "y": "*fp32", "n": "i32"},
                            {"BLOCK": 128})
    kernel = load_triton_kernel(spec, "cuda")
    for n in (1000, 1024, 77):
        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        kernel.launch((triton.cdiv(n, 128),), x, y, n)
        torch.testing.assert_close(y, x + 1)
    assert kernel._bound and all(run.__name__ == "direct" for run in kernel._bound.values())


@pytest.mark.parametrize("values", [(0, 16, 1), (17, 2**31, 2**31 - 1), (-5, 2**63, 32)])
def test_the_inline_key_is_the_per_argument_rule(values: tuple[int, int, int]) -> None:
    from ember.runtime.compiled.triton_kernel import argument_specialization, specialization_key

    signature = {"x": "*fp32", "y": "*bf16", "n": "i32", "m": "i64", "k": "i32", "s": "fp32"}
    base = torch.zeros(8)
    args = (base, base[1:].to(torch.bfloat16)[1:], *values, 0.5)
    assert specialization_key(signature)(args) == tuple(map(argument_specialization, args))
    one = specialization_key({"x": "*fp32"})((base,))
    assert one == (argument_specialization(base),)
