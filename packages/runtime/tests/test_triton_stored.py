"""The Triton binary store (``triton_stored``): a binary built for ``sm_90`` on this
machine (no GPU) goes in and comes back as Triton's compiled kernel, with the launcher
source a launch needs, without Triton's compiler; misses, corrupt entries and links;
``TritonKernel`` and the warm-up taking a stored binary instead of compiling (with
stand-ins for the GPU; the CUDA test at the end runs it for real, across processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from ember.runtime.compiled import triton_stored, triton_warmed
from ember.runtime.compiled.triton_kernel import TritonKernel, TritonKernelSpec
from ember.runtime.config import config, patch

pytest.importorskip("triton")

SOURCE = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def add_one_stored(x, y, BLOCK: tl.constexpr):\n"
    "    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
    "    tl.store(y + i, tl.load(x + i) + 1)\n"
)
SPEC = TritonKernelSpec("add_one_stored", SOURCE, {"x": "*fp32", "y": "*fp32"}, {"BLOCK": 128})
ALIGNED = ((torch.float32, True), (torch.float32, True))
CUDA0 = torch.device("cuda", 0)


@pytest.fixture(autouse=True)
def hopper(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """A cache of its own, and device 0 taken for an sm_90 GPU."""
    monkeypatch.setattr(triton_stored, "device_capability", lambda device: (9, 0))
    triton_warmed.clear()
    with patch(cache_dir=tmp_path / "cache"):
        yield
    triton_warmed.clear()


@pytest.fixture(scope="module")
def built() -> Any:
    """Triton's compiled kernel of SPEC for sm_90, as Triton's compiler returns it."""
    from ember.runtime.compiled.triton_aot import build_for_target

    return build_for_target(SPEC)


def _fn() -> Any:
    from ember.runtime.compiled.triton_kernel import jit_function_from_source

    return jit_function_from_source(SPEC, interpret=False, device="cuda-sm90")


def test_a_stored_binary_comes_back_as_the_compiled_kernel(built: Any) -> None:
    before = triton_stored.stats()
    assert triton_stored.store(SPEC, CUDA0, ALIGNED, built)
    loaded = triton_stored.load(SPEC, _fn(), CUDA0, ALIGNED)
    after = triton_stored.stats()
    assert (after["stored"] - before["stored"], after["loaded"] - before["loaded"]) == (1, 1)
    assert loaded is not None and loaded is not built
    assert loaded.kernel == built.kernel and loaded.asm["cubin"] == built.asm["cubin"]
    assert loaded.metadata == built.metadata
    assert loaded.packed_metadata == built.packed_metadata
    # the launcher source: every parameter typed, the constexpr by position, as the
    # compiled kernel's own source object has them
    assert loaded.src.signature == built.src.signature == {
        "x": "*fp32", "y": "*fp32", "BLOCK": "constexpr"}
    assert loaded.src.constants == built.src.constants == {(2,): 128}
    # only the metadata and the binary were kept, not every stage of IR
    assert sorted(loaded.asm) == ["cubin"] and len(built.asm) > 1
    assert loaded.module is None  # loaded onto the device at its first use


def test_another_specialization_capability_or_kernel_is_a_miss(
        built: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert triton_stored.store(SPEC, CUDA0, ALIGNED, built)
    misaligned = ((torch.float32, True), (torch.float32, False))
    assert triton_stored.load(SPEC, _fn(), CUDA0, misaligned) is None
    other = TritonKernelSpec(SPEC.name, SPEC.source, SPEC.signature, {"BLOCK": 256})
    assert triton_stored.load(other, _fn(), CUDA0, ALIGNED) is None
    monkeypatch.setattr(triton_stored, "device_capability", lambda device: (8, 0))
    assert triton_stored.load(SPEC, _fn(), CUDA0, ALIGNED) is None
    assert triton_stored.stored_binaries() == 1


def _entry_dir() -> Path:
    from ember.runtime.compiled.triton_cache import cache_root

    (entry,) = [p for p in (cache_root() / "triton-binaries").iterdir()
                if not p.name.startswith(".")]
    return entry


def test_a_corrupt_entry_is_a_miss_with_a_warning_and_is_removed(built: Any) -> None:
    assert triton_stored.store(SPEC, CUDA0, ALIGNED, built)
    entry = _entry_dir()
    binary = entry / "kernel.cubin"
    data = bytearray(binary.read_bytes())
    data[len(data) // 2] ^= 0xFF
    binary.write_bytes(bytes(data))
    with pytest.warns(triton_stored.StoredBinaryWarning, match="do not match its manifest"):
        assert triton_stored.load(SPEC, _fn(), CUDA0, ALIGNED) is None
    assert not entry.exists()
    assert triton_stored.store(SPEC, CUDA0, ALIGNED, built)  # stored again
    assert triton_stored.load(SPEC, _fn(), CUDA0, ALIGNED) is not None


def test_an_entry_that_is_a_link_is_removed_not_followed(built: Any, tmp_path: Path) -> None:
    assert triton_stored.store(SPEC, CUDA0, ALIGNED, built)
    entry = _entry_dir()
    elsewhere = tmp_path / "elsewhere"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    with pytest.warns(triton_stored.StoredBinaryWarning, match="not a directory"):
        assert triton_stored.load(SPEC, _fn(), CUDA0, ALIGNED) is None
    assert not os.path.lexists(entry) and (elsewhere / "kernel.cubin").exists()


def test_a_compiled_kernel_without_files_is_not_stored(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    with patch(logs="cache"):
        assert not triton_stored.store(SPEC, CUDA0, ALIGNED, object())
    assert "no binary to store" in capsys.readouterr().err
    assert triton_stored.stored_binaries() == 0


class FakeJit:
    """Triton's JITFunction as a launch sees it; records JIT launches."""

    arg_names = ("x", "y", "BLOCK")

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.__name__ = SPEC.name

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def launch(*args: Any, **options: Any) -> None:
            self.calls.append("jit")
        return launch

    def warmup(self, *args: Any, grid: tuple[int, ...], **options: Any) -> Any:
        raise RuntimeError("no GPU")


def test_the_first_launch_takes_the_stored_binary_instead_of_jit(
        built: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import ember.runtime.compiled.triton_kernel as triton_kernel

    assert triton_stored.store(SPEC, CUDA0, ALIGNED, built)
    launched: list[tuple[Any, tuple[int, ...]]] = []

    class Loaded:  # the part of a compiled kernel the launch touches before running it
        def __init__(self, compiled: Any) -> None:
            self.compiled = compiled

        def __getitem__(self, grid: tuple[int, ...]) -> Any:
            return None

    real_load = triton_stored.load

    def load(*args: Any) -> Loaded | None:
        compiled = real_load(*args)
        return None if compiled is None else Loaded(compiled)

    monkeypatch.setattr(triton_stored, "load", load)
    monkeypatch.setattr(triton_kernel, "binary_launch", lambda compiled, trailing, static: (
        lambda grid, args: launched.append((compiled.compiled, grid))))
    fn = FakeJit()
    kernel = TritonKernel(SPEC, fn, interpret=False, device=CUDA0)
    x, y = torch.zeros(256), torch.zeros(256)
    kernel.launch((2,), x, y)
    kernel.launch((3,), x, y)
    assert fn.calls == []
    assert [grid for _, grid in launched] == [(2, 1, 1), (3, 1, 1)]
    assert launched[0][0].kernel == built.kernel
    kernel.launch((2,), x[1:], y[1:])  # misaligned: not stored, so JIT
    assert fn.calls == ["jit"]


def test_a_kernel_with_an_integer_argument_is_never_looked_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any) -> None:
        raise AssertionError("looked up")

    monkeypatch.setattr(triton_stored, "load", fail)
    spec = TritonKernelSpec(SPEC.name, SPEC.source, {"x": "*fp32", "y": "*fp32", "n": "i32"},
                            {"BLOCK": 128})
    fn = FakeJit()
    fn.arg_names = ("x", "y", "n", "BLOCK")  # type: ignore[misc]
    TritonKernel(spec, fn, interpret=False, device=CUDA0).launch(
        (2,), torch.zeros(4), torch.zeros(4), 4)
    assert fn.calls == ["jit"]


_PROCESS = textwrap.dedent("""
    import sys, torch
    import triton
    from ember.runtime.compiled import triton_stored
    from ember.runtime.compiled.triton_kernel import TritonKernelSpec, load_triton_kernel
    compiles = []
    triton.knobs.runtime.jit_cache_hook = lambda *a, **k: compiles.append(1) or False
    spec = TritonKernelSpec("add_one_stored", {source!r}, {{"x": "*fp32", "y": "*fp32"}},
                            {{"BLOCK": 128}})
    kernel = load_triton_kernel(spec, "cuda")
    x = torch.randn(256, device="cuda")
    y = torch.zeros_like(x)
    kernel.launch((2,), x, y)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x + 1)
    counts = triton_stored.stats()
    print(len(compiles), counts.get("stored", 0), counts.get("loaded", 0))
""")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_a_second_process_launches_the_stored_binary_without_triton_compiling(
        tmp_path: Path) -> None:
    """Two processes over one Ember cache, each with an empty Triton cache of its own:
    the first compiles and stores; the second never enters Triton's compiler (its JIT
    hook is not called, and its Triton cache stays empty) and computes the same."""
    script = _PROCESS.format(source=SOURCE + f"# {tmp_path}\n")
    results = []
    for run in ("first", "second"):
        env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "ember"),
                   TRITON_CACHE_DIR=str(tmp_path / f"triton-{run}"))
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        results.append(out.stdout.split()[-3:])
    assert results == [["1", "1", "0"], ["0", "0", "1"]]
    second_cache = tmp_path / "triton-second"
    kernels = [p for p in second_cache.rglob("*.cubin")] if second_cache.exists() else []
    assert kernels == []


def test_a_stored_binary_torchs_launcher_takes_is_not_loaded_by_triton(
        built: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # with triton_static on, binding a stored binary neither loads it through Triton
    # (CompiledKernel[grid], which needs a GPU driver here and would send the launch to
    # the JIT) nor makes Triton's launcher: torch's launcher loads and runs it
    from types import SimpleNamespace

    from ember.runtime.compiled import triton_static
    from triton.runtime import driver

    assert triton_stored.store(SPEC, CUDA0, ALIGNED, built)
    launches: list[tuple[Any, ...]] = []
    monkeypatch.setattr(config, "torch_launcher", True)
    monkeypatch.setattr(triton_static, "static_cuda_launcher",
                        lambda: (lambda *a: 31, lambda *a: launches.append(a)))
    monkeypatch.setattr(driver, "_active", SimpleNamespace(
        get_current_stream=lambda device: 5, get_current_device=lambda: 0))
    fn = FakeJit()
    kernel = TritonKernel(SPEC, fn, interpret=False, device=CUDA0)
    x, y = torch.zeros(256), torch.zeros(256)
    kernel.launch((2,), x, y)
    assert fn.calls == []
    assert [(a[0], a[1], a[7][:2]) for a in launches] == [(31, 2, (x, y))]
