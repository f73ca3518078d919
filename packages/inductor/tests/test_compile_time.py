"""Cold compile time (issue #17 item 5): the stage profile of a whole compile, kernel
dedupe, and parallel kernel builds that produce exactly what serial ones do."""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from ember.inductor.codegen.backend import KernelSource
from ember.inductor.codegen.build import GraphKernels, KernelBuilds, build_kernels
from ember.inductor.codegen.dedupe import canonical_form, share_identical_kernels
from ember.inductor.loop_ir import Buffer, Kernel, Literal, Load, Store, Var
from ember.runtime.config import patch
from ember.runtime.phases import compile_profile, last_compile_profile

sys.path.insert(0, str(Path(__file__).parent))

from helpers import compile_and_load, trace


def _layers(n: int) -> torch.nn.Module:
    torch.manual_seed(0)
    parts: list[torch.nn.Module] = []
    for _ in range(n):
        parts += [torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.GELU()]
    return torch.nn.Sequential(*parts)


def test_a_cold_training_compile_reports_every_phase(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import ember.frontend

    model = _layers(2)
    with patch(cache_dir=tmp_path, program_cache=False, logs=frozenset({"stages"})):
        fast = ember.frontend.compile(model, options={"capture": "trace"})
        fast(torch.randn(4, 16)).sum().backward()
    profile = last_compile_profile()
    assert profile is not None
    assert list(profile.phases) == [
        "capture", "program cache",
        "aot", "aot/functionalize", "aot/autograd", "aot/cleanup", "aot/partition",
        "inductor", "inductor/passes", "inductor/lowering", "inductor/scheduling",
        "inductor/codegen", "inductor/kernel builds", "runtime load"]
    assert profile.phases["inductor/lowering"].calls == 2  # forward and backward
    # forward and backward: one C++ file each, built at once
    assert profile.counts["cpp builds"] == 2 and profile.counts["build threads"] >= 1
    assert profile.seconds("inductor") >= profile.seconds("inductor/kernel builds") > 0
    err = capsys.readouterr().err
    assert err.count("compile profile:") == 1
    assert re.search(r"\n      kernel builds +\d+\.\d{3} ", err) is None  # two levels only
    assert re.search(r"\n    kernel builds +\d+\.\d{3} +\d+\.\d%", err)


def _wrapper_calls(compiled: Any, graph: str = "forward") -> list[str]:
    wrapper = compiled.files[f"{graph}/wrapper.py"].decode()
    return re.findall(r"^    (kernel\d+)\(", wrapper, re.MULTILINE)


def test_identical_layers_share_one_copy_of_each_kernel(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    def layer_norms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            x = torch.nn.functional.layer_norm(x @ w, (16,))
        return x

    x, w = torch.randn(4, 16), torch.randn(16, 16)
    with patch(logs=frozenset({"stages"})), compile_profile() as profile:
        compiled, run = compile_and_load(trace(layer_norms, [x, w]))
    torch.testing.assert_close(run(x, w)[0], layer_norms(x, w))
    assert _wrapper_calls(compiled) == ["kernel0", "kernel0", "kernel0"]
    wrapper = compiled.files["forward/wrapper.py"].decode()
    assert "# kernel2: fused from" in wrapper and "(runs kernel0: identical code)" in wrapper
    (source,) = [v.decode() for k, v in compiled.files.items() if k.endswith(".cpp")]
    assert re.findall(r'extern "C" void (kernel\d+)\(', source) == ["kernel0"]
    assert compiled.metadata["kernels"] == 1
    assert profile.counts["deduped kernels"] == 2
    assert ("graph 'forward': 2 kernels run the code of an identical one "
            "(kernel1->kernel0, kernel2->kernel0)") in capsys.readouterr().err


def test_identical_triton_kernels_are_one_module() -> None:
    from ember.inductor.codegen.triton.testing import triton_for_cpu

    pytest.importorskip("triton")

    def softmaxes(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.softmax(torch.softmax(x, -1) @ w, -1)  # the matmul between: 2 kernels

    x, w = torch.randn(8, 32), torch.randn(32, 32)
    with triton_for_cpu():
        compiled, run = compile_and_load(trace(softmaxes, [x, w]), precompile=False)
    assert _wrapper_calls(compiled) == ["kernel0", "kernel0"]
    assert len([k for k in compiled.files if k.endswith(".py") and "wrapper" not in k]) == 1
    torch.testing.assert_close(run(x, w)[0], softmaxes(x, w))


def _kernel(name: str, src: str, dst: str, value: float) -> Kernel:
    x = Var("x0", 8)
    dtype = torch.float32
    return Kernel(name, (x,), (), (
        Load("v0", src, x, dtype), Literal("v1", value, dtype),
        Store(dst, x, "v0")),
        (Buffer(src, dtype, (8,), (1,)), Buffer(dst, dtype, (8,), (1,))))


def test_kernels_equal_up_to_names_share_code_and_constants_tell_them_apart() -> None:
    a = _kernel("kernel0", "arg0", "buf1", 0.0)
    b = _kernel("kernel1", "buf1", "buf2", 0.0)  # a renamed
    c = _kernel("kernel2", "buf2", "buf3", -0.0)  # -0.0 == 0.0 in Python, not in C
    d = _kernel("kernel3", "buf3", "buf4", 0)  # an int literal: other code
    assert canonical_form(a) == canonical_form(b)
    shared = share_identical_kernels([a, b, c, d])
    assert [k.name for k in shared.unique] == ["kernel0", "kernel2", "kernel3"]
    assert shared.runs == {"kernel1": "kernel0"} and shared.deduped == 1


def _program_files(threads: int, cache: Path) -> tuple[dict[str, bytes], list[str]]:
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.relu(x @ y).sum(0), torch.softmax(x, -1) * 2

    x, y = torch.randn(8, 8), torch.randn(8, 8)
    with patch(compile_threads=threads, cache_dir=cache):
        compiled, _ = compile_and_load(trace(fn, [x, y]))
    return dict(compiled.files), sorted(p.name for p in (cache / "cpp").iterdir())


def test_parallel_and_serial_builds_give_the_same_artifact(tmp_path: Path) -> None:
    serial = _program_files(1, tmp_path / "serial")
    parallel = _program_files(4, tmp_path / "parallel")
    assert serial == parallel and serial[1]  # same files, same C++ cache keys


def _cpp(name: str, text: str) -> KernelSource:
    return KernelSource("cpp", name, text, name, {"arg_dtypes": ["float32"]})


def test_a_failed_build_names_its_kernels_and_fails_only_its_graph(tmp_path: Path) -> None:
    good = _cpp("kernel0", 'extern "C" void kernel0(float* p) { p[0] = 1.0f; }\n')
    bad = _cpp("kernel4", 'extern "C" void kernel4(float* p) { p[0] = oops; }\n')
    cpu = torch.device("cpu")
    with patch(cache_dir=tmp_path, compile_threads=2):
        failed = build_kernels([GraphKernels("forward", cpu, [good]),
                                GraphKernels("backward", cpu, [bad])])
    assert list(failed) == ["backward"]
    assert str(failed["backward"]).startswith(
        "g++ failed to compile the C++ kernels kernel4 of graph 'backward':")


def test_a_graphs_costliest_builds_start_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    from ember.runtime.compiled import cpp_build

    started: list[str] = []
    gate = threading.Event()

    def fake_compile(source: str, what: str) -> str:
        started.append(what)
        gate.wait(5)  # the pool's two threads take the first two jobs before any ends
        time.sleep(0.01)
        return what

    monkeypatch.setattr(cpp_build, "compile_cpp", fake_compile)
    sources = [_cpp(f"kernel{i}", "x" * n) for i, n in enumerate((10, 3000, 20, 2000))]
    with patch(compile_threads=2):
        builds = KernelBuilds()
        builds.start(GraphKernels("forward", torch.device("cpu"), sources))
        time.sleep(0.2)
        gate.set()
        assert builds.finish() == {}
    assert sorted(started[:2]) == sorted(
        f"the C++ kernels {k} of graph 'forward'" for k in ("kernel1", "kernel3"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the case without a GPU")
def test_without_a_gpu_triton_kernels_are_left_to_their_first_launch(
        capsys: pytest.CaptureFixture[str]) -> None:
    source = KernelSource("triton", "kernel0", "not built", "kernel0", {})
    with patch(logs=frozenset({"stages"})), compile_profile() as profile:
        failed = build_kernels([GraphKernels("forward", torch.device("cuda"), [source])])
    assert failed == {} and "triton builds" not in profile.counts
    assert "the Triton kernels are built at their first launch (precompile_triton is off)" \
        in capsys.readouterr().err
    with patch(logs=frozenset({"stages"})), compile_profile() as profile:
        failed = build_kernels([GraphKernels("forward", torch.device("cuda"), [source])],
                               triton=True)
    assert failed == {} and "triton builds" not in profile.counts
    assert "the Triton kernels are built at their first launch (no GPU)" \
        in capsys.readouterr().err


def test_triton_kernels_compile_for_sm90_in_threads_as_they_do_one_by_one(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Triton's own compiler in several threads at once (no GPU: for an sm_90 target)
    gives the same PTX as one kernel at a time."""
    pytest.importorskip("triton")
    from ember.inductor.codegen.triton.testing import triton_for_cpu
    from ember.runtime.compiled.parallel_build import BuildJob, run_builds
    from ember.runtime.compiled.triton_aot import compile_for_target
    from ember.runtime.compiled.triton_launcher import spec_from_entry

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.softmax(x, -1), x.amax(0), torch.tanh(x) + 1

    with triton_for_cpu():
        compiled, _ = compile_and_load(trace(fn, [torch.randn(8, 64)]), precompile=False)
    specs = [spec_from_entry(e, compiled.files)
             for e in compiled.metadata["compiled"]["graphs"]["forward"]["kernels"]]
    assert len(specs) == 2  # softmax and tanh fuse; amax(0) reduces another way

    def ptx(threads: int) -> list[str]:
        monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / f"triton{threads}"))
        jobs = [BuildJob(s.name, functools.partial(compile_for_target, s)) for s in specs]
        return [r.get().asm["ptx"] for r in run_builds(jobs, "Triton builds", threads)]

    serial = ptx(1)
    assert ptx(3) == serial and all(".target sm_90" in p for p in serial)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_triton_kernels_are_built_before_the_first_launch_on_a_gpu(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With precompile_triton every Triton kernel is built at compile time, in the pool;
    the first call compiles nothing more."""
    import triton
    from ember.runtime.compiled import load_executor

    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.softmax(x, -1) * w, torch.relu(x - w).sum(0) + 1

    x, w = torch.randn(64, 128, device="cuda"), torch.randn(64, 128, device="cuda")
    compiles: list[object] = []

    def before_compile(*args: Any, **kwargs: Any) -> bool:
        compiles.append(kwargs.get("fn", args))
        return False  # compile it

    with patch(cache_dir=tmp_path), compile_profile() as profile:
        compiled, _ = compile_and_load(trace(fn, [x, w]), precompile_triton=True)
    assert profile.counts["triton builds"] >= compiled.metadata["kernels"] >= 1
    # each compiled by a worker process and loaded from Triton's on-disk cache here
    # (triton_processes); none compiled again in its build thread
    assert profile.counts["triton worker processes"] >= 1
    assert profile.counts.get("triton process builds") == profile.counts["triton builds"]
    assert "triton process builds unused" not in profile.counts
    assert "triton process builds failed" not in profile.counts
    run = load_executor(compiled, "forward")
    monkeypatch.setattr(triton.knobs.runtime, "jit_cache_hook", before_compile)
    got = run([x, w])
    torch.cuda.synchronize()
    assert compiles == []  # the launch found every binary built
    torch.testing.assert_close(got[1], fn(x, w)[1])
