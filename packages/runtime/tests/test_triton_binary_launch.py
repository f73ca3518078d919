"""The direct launch of a compiled Triton binary (``triton_kernel.binary_launch``): the
call Triton's own ``CompiledKernel[grid](*args)`` makes, bound once, used only where this
Triton's runner is written that way and no launch hook is installed."""

from __future__ import annotations

from typing import Any

import pytest
import torch

triton = pytest.importorskip("triton")

from ember.runtime.compiled import triton_binary  # noqa: E402
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
    # the driver's device, not this torch's raw call (absent from CPU builds)
    monkeypatch.setattr(triton_binary, "raw_current_device", lambda: None)


def test_this_tritons_runner_is_recognised_as_direct() -> None:
    from triton.compiler.compiler import CompiledKernel

    # on the GPU machine the fast path is taken with this Triton's binaries
    assert triton_binary.runner_is_direct(CompiledKernel)


def test_direct_launch_calls_run_with_the_runners_arguments(fake_driver: None) -> None:
    kernel = _DirectKernel()
    launch = binary_launch(kernel, (64,))
    launch((4, 2, 1), ("x", 7))
    assert kernel.calls == [(4, 2, 1, "stream-of-3", "fn", "packed", None, None, None, "x", 7, 64)]
    assert kernel.runner_calls == []


def test_the_device_comes_from_the_raw_call_where_torch_has_one(
        fake_driver: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton_binary, "raw_current_device", lambda: (lambda: 5))
    kernel = _DirectKernel()
    binary_launch(kernel, ())((1, 1, 1), ("x",))
    assert kernel.calls == [(1, 1, 1, "stream-of-5", "fn", "packed", None, None, None, "x")]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_raw_current_device_is_torchs_current_device() -> None:
    from ember.runtime.compiled._torch import raw_current_device

    getter = raw_current_device()
    assert getter is not None and getter() == torch.cuda.current_device()


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
    names = {run.__name__ for run in kernel._bound.values()} if kernel._bound else set()
    assert names and names <= {"direct", "through_launcher"}
    if triton.__version__.startswith("3.6."):  # the H200 machine's Triton: flat launcher
        assert names == {"direct"}
        compiled = kernel._fn.warmup(x, y, 77, grid=(1, 1, 1), **kernel._options)
        assert triton_binary.flat_launch(compiled.run) is not None


@pytest.mark.parametrize("values", [(0, 16, 1), (17, 2**31, 2**31 - 1), (-5, 2**63, 32)])
def test_the_inline_key_is_the_per_argument_rule(values: tuple[int, int, int]) -> None:
    from ember.runtime.compiled.triton_kernel import argument_specialization, specialization_key

    signature = {"x": "*fp32", "y": "*bf16", "n": "i32", "m": "i64", "k": "i32", "s": "fp32"}
    base = torch.zeros(8)
    args = (base, base[1:].to(torch.bfloat16)[1:], *values, 0.5)
    assert specialization_key(signature)(args) == tuple(map(argument_specialization, args))
    one = specialization_key({"x": "*fp32"})((base,))
    assert one == (argument_specialization(base),)


class _ForwardingLauncher:
    """A launcher object whose ``__call__`` forwards to its C ``launch`` with constants
    added after ``function`` (the form :func:`triton_binary.flat_launch` takes)."""

    def __init__(self, scratch: int = 0) -> None:
        self.global_scratch_size, self.profile_scratch_size = scratch, 0
        self.launch_cooperative_grid, self.launch_pdl = False, True
        self.calls: list[tuple[Any, ...]] = []
        self.probed = 0
        self.launch = lambda *a: self.calls.append(a)

    def __call__(self, gx: int, gy: int, gz: int, stream: Any, function: Any,
                 *args: Any) -> None:
        self.probed += 1
        scratch = bytes(self.global_scratch_size * gx) or None
        self.launch(gx, gy, gz, stream, function, self.launch_cooperative_grid,
                    self.launch_pdl, scratch, None, *args)


class _PackingLauncher(_ForwardingLauncher):
    def __call__(self, gx: int, gy: int, gz: int, stream: Any, function: Any,
                 *args: Any) -> None:  # the arguments as one tuple: not flat
        self.launch(gx, gy, gz, stream, function, None, args)


class _GridLauncher(_ForwardingLauncher):
    def __call__(self, gx: int, gy: int, gz: int, stream: Any, function: Any,
                 *args: Any) -> None:  # a value that follows the grid: not constant
        self.launch(gx, gy, gz, stream, function, gx * gy * gz, *args)


class _TwiceLauncher(_ForwardingLauncher):
    def __call__(self, gx: int, gy: int, gz: int, stream: Any, function: Any,
                 *args: Any) -> None:
        self.launch(gx, gy, gz, stream, function, *args)
        self.launch(gx, gy, gz, stream, function, *args)


def test_a_forwarding_launcher_is_called_through_its_c_launch() -> None:
    launcher = _ForwardingLauncher()
    flat = triton_binary.flat_launch(launcher)
    assert flat is not None and flat[1] == (False, True, None, None)
    assert launcher.calls == [] and launcher.probed == 0  # probed on a copy


@pytest.mark.parametrize("launcher", [_PackingLauncher(), _GridLauncher(), _TwiceLauncher(),
                                      _ForwardingLauncher(scratch=64)],
                         ids=["packed", "grid-dependent", "twice", "scratch"])
def test_other_launchers_are_not_flattened(launcher: _ForwardingLauncher) -> None:
    assert triton_binary.flat_launch(launcher) is None
    assert launcher.probed == 0 and launcher.calls == []


class _FlatKernel(_DirectKernel):
    """A binary whose launcher object forwards to its C launch."""

    launcher = _ForwardingLauncher()

    @property
    def run(self) -> Any:
        return self.launcher


def test_direct_launch_through_a_flat_launcher(fake_driver: None) -> None:
    kernel = _FlatKernel()
    launcher = kernel.launcher
    launch = binary_launch(kernel, (64,))
    launch((4, 2, 1), ("x", 7))
    assert launcher.calls == [(4, 2, 1, "stream-of-3", "fn", False, True, None, None,
                               "packed", None, None, None, "x", 7, 64)]
    assert launcher.probed == 0 and kernel.runner_calls == []


def test_this_tritons_launcher_is_flattened_only_where_equivalent() -> None:
    """The installed Triton's CUDA launcher class, made without compiling: whatever
    flat_launch decides, a flat call must be exactly what its ``__call__`` does."""
    try:
        from triton.backends.nvidia.driver import CudaLauncher
    except ImportError:
        pytest.skip("this Triton has no CUDA backend")
    launcher = object.__new__(CudaLauncher)
    for name in ("global_scratch_size", "profile_scratch_size"):
        setattr(launcher, name, 0)
    for name in ("global_scratch_align", "profile_scratch_align", "num_ctas"):
        setattr(launcher, name, 1)
    launcher.launch_cooperative_grid, launcher.launch_pdl = False, False
    launcher.gsan_enabled = False
    recorded: list[tuple[Any, ...]] = []
    launcher.launch = lambda *a: recorded.append(a)
    flat = triton_binary.flat_launch(launcher)
    try:
        launcher(2, 1, 1, 5, "fn", "packed", None, None, None, "x", 7)
    except Exception:  # noqa: BLE001 - a launcher that needs more than these attributes
        assert flat is None
        return
    if flat is not None:
        assert recorded == [(2, 1, 1, 5, "fn", *flat[1], "packed", None, None, None, "x", 7)]
