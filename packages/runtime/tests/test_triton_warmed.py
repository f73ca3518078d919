"""Triton binaries built before their first launch (``triton_warmed``): the table the
warm-up fills and the first launch reads, and ``TritonKernel`` taking a binary from it
when the launch's argument specialization is the warm-up's (with a stand-in for
Triton's ``JITFunction`` and compiled kernel; the CUDA test runs it for real)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from ember.runtime.compiled import triton_warmed
from ember.runtime.compiled.triton_kernel import TritonKernel, TritonKernelSpec

SPEC = TritonKernelSpec("k", "import triton\n# k\n", {"x_ptr": "*fp32", "out_ptr": "*fp32"},
                        {"XBLOCK": 128})


@pytest.fixture(autouse=True)
def empty_table() -> Iterator[None]:
    triton_warmed.clear()
    yield
    triton_warmed.clear()


class FakeCompiled:
    """Shaped like Triton's CompiledKernel: ``compiled[grid](*args)`` runs it."""

    def __init__(self, calls: list[tuple[str, Any]]) -> None:
        self.calls = calls

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def runner(*args: Any) -> None:
            self.calls.append(("warmed", (grid, args)))
        return runner


class FakeJit:
    arg_names = ("x_ptr", "out_ptr", "XBLOCK")

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def launch(*args: Any, **options: Any) -> None:
            self.calls.append(("jit", (grid, args)))
        return launch

    def warmup(self, *args: Any, grid: tuple[int, ...], **options: Any) -> Any:
        jit = self

        class Compiled:
            def __getitem__(self, g: tuple[int, ...]) -> Any:
                def runner(*a: Any) -> None:
                    jit.calls.append(("bound", (g, a)))
                return runner
        return Compiled()


def _warm(spec: TritonKernelSpec, device: int, args: list[torch.Tensor],
          calls: list[tuple[str, Any]]) -> FakeCompiled:
    compiled = FakeCompiled(calls)
    triton_warmed.record(triton_warmed.warm_key(spec, device),
                         triton_warmed.tensor_specialization(args), compiled)
    return compiled


def test_a_binary_is_taken_only_for_its_key_and_specialization() -> None:
    x = torch.zeros(4)
    compiled = _warm(SPEC, 0, [x, x], [])
    aligned = triton_warmed.tensor_specialization([x, x])
    assert triton_warmed.take(triton_warmed.warm_key(SPEC, 0), aligned) is compiled
    # a misaligned view, another dtype, device, warps or source: not this binary
    assert triton_warmed.take(triton_warmed.warm_key(SPEC, 0),
                              triton_warmed.tensor_specialization([x[1:], x])) is None
    assert triton_warmed.take(triton_warmed.warm_key(SPEC, 0),
                              triton_warmed.tensor_specialization([x.double(), x])) is None
    assert triton_warmed.take(triton_warmed.warm_key(SPEC, 1), aligned) is None
    other = TritonKernelSpec(SPEC.name, SPEC.source, SPEC.signature, SPEC.constexprs,
                             num_warps=8)
    assert triton_warmed.take(triton_warmed.warm_key(other, 0), aligned) is None
    edited = TritonKernelSpec(SPEC.name, SPEC.source + "\n", SPEC.signature, SPEC.constexprs)
    assert triton_warmed.take(triton_warmed.warm_key(edited, 0), aligned) is None
    assert triton_warmed.stats() == {"entries": 1, "recorded": 1, "taken": 1}


def test_the_oldest_binaries_are_dropped_past_the_limit(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.setattr(triton_warmed, "MAX_ENTRIES", 3)
    specs = [TritonKernelSpec(f"k{i}", SPEC.source, SPEC.signature) for i in range(5)]
    x = torch.zeros(4)
    for s in specs:
        _warm(s, 0, [x, x], [])
    spec_key = triton_warmed.tensor_specialization([x, x])
    kept = [triton_warmed.take(triton_warmed.warm_key(s, 0), spec_key) is not None
            for s in specs]
    assert kept == [False, False, True, True, True]


def test_build_threads_and_launching_threads_share_the_table() -> None:
    x = torch.zeros(4)
    spec_key = triton_warmed.tensor_specialization([x, x])
    specs = [TritonKernelSpec(f"k{i}", SPEC.source, SPEC.signature) for i in range(64)]
    found: list[bool] = []

    def build(part: list[TritonKernelSpec]) -> None:
        for s in part:
            _warm(s, 0, [x, x], [])

    def launch(part: list[TritonKernelSpec]) -> None:
        for s in part:
            found.append(triton_warmed.take(triton_warmed.warm_key(s, 0), spec_key)
                         is not None)

    threads = [threading.Thread(target=build, args=(specs[i::8],)) for i in range(8)]
    threads += [threading.Thread(target=launch, args=(specs[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert triton_warmed.stats()["entries"] == 64 and len(found) == 64
    assert all(triton_warmed.take(triton_warmed.warm_key(s, 0), spec_key) for s in specs)


CUDA0 = torch.device("cuda", 0)


def _kernel(fn: FakeJit, device: torch.device | None = CUDA0) -> TritonKernel:
    return TritonKernel(SPEC, fn, interpret=False, device=device)


def test_the_first_launch_runs_the_warmed_binary_not_jit() -> None:
    fn = FakeJit()
    x, out = torch.zeros(256), torch.zeros(256)
    _warm(SPEC, 0, [x, out], fn.calls)
    k = _kernel(fn)
    k.launch((2,), x, out)
    k.launch((3,), x, out)
    # no JIT at all: the warmed binary, constexprs appended, bound for later launches
    assert fn.calls == [("warmed", ((2, 1, 1), (x, out, 128))),
                        ("warmed", ((3, 1, 1), (x, out, 128)))]
    # a misaligned view is another specialization: JIT, then its own bound binary
    k.launch((2,), x[1:], out[1:])
    k.launch((2,), x[1:], out[1:])
    assert [c[0] for c in fn.calls[2:]] == ["jit", "bound"]


def test_a_kernel_of_another_device_or_without_one_compiles_at_launch() -> None:
    x, out = torch.zeros(256), torch.zeros(256)
    for device in (torch.device("cuda", 1), None):
        fn = FakeJit()
        _warm(SPEC, 0, [x, out], fn.calls)
        _kernel(fn, device).launch((2,), x, out)
        assert [c[0] for c in fn.calls] == ["jit"]


def test_without_warmed_binaries_a_launch_does_not_look(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    def fail(*args: Any) -> None:
        raise AssertionError("looked up")

    monkeypatch.setattr(triton_warmed, "take", fail)
    fn = FakeJit()
    x, out = torch.zeros(256), torch.zeros(256)
    _kernel(fn).launch((2,), x, out)
    assert [c[0] for c in fn.calls] == ["jit"]


def test_a_warmed_binary_that_does_not_load_leaves_the_launch_to_jit(
        capsys: pytest.CaptureFixture[str]) -> None:
    from ember.runtime.config import patch

    class Broken:
        def __getitem__(self, grid: tuple[int, ...]) -> Any:
            raise RuntimeError("out of resources")

    fn = FakeJit()
    x, out = torch.zeros(256), torch.zeros(256)
    triton_warmed.record(triton_warmed.warm_key(SPEC, 0),
                         triton_warmed.tensor_specialization([x, out]), Broken())
    with patch(logs="cache"):
        _kernel(fn).launch((2,), x, out)
    assert [c[0] for c in fn.calls] == ["jit"]
    assert "the binary built before launch is not used (RuntimeError: out of resources)" \
        in capsys.readouterr().err


ADD_ONE = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def add_one_warmed(x, y, BLOCK: tl.constexpr):\n"
    "    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
    "    tl.store(y + i, tl.load(x + i) + 1)\n"
)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_a_kernel_warmed_on_the_gpu_launches_without_compiling(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Warmed under one Ember cache root, loaded under another (another JITFunction, as
    in the inductor's CUDA test): the launch takes the warmed binary; a misaligned
    launch compiles (the hook does see compiles)."""
    import triton
    from ember.runtime.compiled.triton_aot import warm_kernel
    from ember.runtime.compiled.triton_kernel import load_triton_kernel
    from ember.runtime.config import patch

    spec = TritonKernelSpec("add_one_warmed", ADD_ONE + f"# {tmp_path}\n",
                            {"x": "*fp32", "y": "*fp32"}, {"BLOCK": 128})
    with patch(cache_dir=tmp_path / "build"):
        warm_kernel(spec, torch.device("cuda"))
    assert triton_warmed.stats()["recorded"] == 1
    compiles: list[object] = []

    def before_compile(*args: Any, **kwargs: Any) -> bool:
        compiles.append(kwargs.get("key"))
        return False  # compile it

    monkeypatch.setattr(triton.knobs.runtime, "jit_cache_hook", before_compile)
    with patch(cache_dir=tmp_path / "load"):
        kernel = load_triton_kernel(spec, "cuda")
    x = torch.randn(257, device="cuda")
    y = torch.zeros_like(x)
    kernel.launch((2,), x, y)
    torch.cuda.synchronize()
    assert compiles == [] and triton_warmed.stats()["taken"] == 1
    torch.testing.assert_close(y[:256], x[:256] + 1)
    kernel.launch((2,), x[1:], y[1:])  # 4 bytes past an aligned address
    torch.cuda.synchronize()
    assert len(compiles) == 1
    torch.testing.assert_close(y[1:], x[1:] + 1)


def test_the_warm_up_makes_the_launcher_or_leaves_it_to_the_launch(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The build thread touches ``compiled.run`` (Triton loads the binary and makes the
    launcher there); a failure is logged and counted, never raised: the first launch
    makes the launcher again and reports its own error."""
    from ember.runtime.compiled.triton_aot import _load_for_launch
    from ember.runtime.config import patch
    from ember.runtime.phases import compile_profile

    class Loads:
        loaded = 0

        @property
        def run(self) -> object:
            Loads.loaded += 1
            return object()

    class Fails:
        @property
        def run(self) -> object:
            raise RuntimeError("out of shared memory")

    with patch(logs=frozenset({"stages"})), compile_profile() as profile:
        _load_for_launch(Loads(), SPEC)
        assert Loads.loaded == 1 and "launchers left to first launch" not in profile.counts
        _load_for_launch(Fails(), SPEC)
    assert profile.counts["launchers left to first launch"] == 1
    assert ("Triton kernel k: launcher left to its first launch (RuntimeError: out of "
            "shared memory)") in capsys.readouterr().err
