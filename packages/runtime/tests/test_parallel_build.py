"""The kernel build pool (compiled/parallel_build.py) and concurrent C++ builds."""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path

import pytest
from ember.runtime.compiled import cpp_build
from ember.runtime.compiled.parallel_build import (
    MAX_DEFAULT_THREADS,
    BuildJob,
    compile_threads,
    run_builds,
)
from ember.runtime.config import Config, patch
from ember.runtime.phases import compile_profile


def test_the_pool_size_comes_from_ember_compile_threads() -> None:
    assert Config.from_env({"EMBER_COMPILE_THREADS": "3"}).compile_threads == 3
    assert Config.from_env({}).compile_threads == 0
    with pytest.raises(ValueError, match="EMBER_COMPILE_THREADS='-1'"):
        Config.from_env({"EMBER_COMPILE_THREADS": "-1"})
    with patch(compile_threads=3):
        assert compile_threads() == 3
    with patch(compile_threads=0):
        assert compile_threads() == min(len(os.sched_getaffinity(0)), MAX_DEFAULT_THREADS)


def test_builds_run_concurrently_and_results_keep_job_order(
        capsys: pytest.CaptureFixture[str]) -> None:
    # NOTE: both jobs wait for each other: they pass only if they run at the same time
    meet = threading.Barrier(2, timeout=10)

    def job(value: int) -> BuildJob[int]:
        def build() -> int:
            meet.wait()
            return value

        return BuildJob(f"kernel{value}", build)

    with patch(logs=frozenset({"stages"})), compile_profile() as profile:
        results = run_builds([job(1), job(2)], "kernel builds", threads=2)
    assert [(r.name, r.value, r.error) for r in results] == [("kernel1", 1, None),
                                                              ("kernel2", 2, None)]
    assert profile.counts == {"build threads": 2}
    assert "kernel builds: 2 builds on 2 threads" in capsys.readouterr().err


def test_one_thread_builds_in_the_calling_thread_one_by_one() -> None:
    threads: list[str] = []

    def build() -> None:
        threads.append(threading.current_thread().name)

    with patch(compile_threads=1):
        run_builds([BuildJob("a", build), BuildJob("b", build)], "kernel builds")
    assert threads == [threading.current_thread().name] * 2


def test_a_failed_build_is_returned_and_does_not_stop_the_others() -> None:
    def bad() -> int:
        raise cpp_build.CppCompileError("g++ failed to compile the C++ kernels kernel3")

    results = run_builds([BuildJob("bad", bad), BuildJob("good", lambda: 7)], "x", threads=2)
    assert isinstance(results[0].error, cpp_build.CppCompileError)
    assert results[1].get() == 7
    with pytest.raises(cpp_build.CppCompileError, match="kernel3"):
        results[0].get()


def _sources() -> list[str]:
    return [f'extern "C" void kernel{i}(float* out) {{ out[0] = {i}.0f; }}\n'
            for i in range(3)]


@pytest.mark.parametrize("threads", [1, 3])
def test_cpp_builds_in_parallel_fill_the_cache_as_serial_ones_do(
        tmp_path: Path, threads: int) -> None:
    """Parallel and serial builds give the same cache entries (keys and sources)."""
    with patch(cache_dir=tmp_path, cache_enabled=True), compile_profile() as profile:
        jobs = [BuildJob(f"kernel{i}", functools.partial(cpp_build.compile_cpp, s))
                for i, s in enumerate(_sources())]
        libraries = [r.get() for r in run_builds(jobs, "kernel builds", threads=threads)]
    keys = [cpp_build.cache_key(s) for s in _sources()]
    assert [p.parent.name for p in libraries] == keys
    assert sorted(p.name for p in (tmp_path / "cpp").iterdir()) == sorted(keys)
    assert [(p.parent / "kernel.cpp").read_text() for p in libraries] == _sources()
    assert profile.counts["cpp builds"] == 3


def test_a_cpp_build_error_names_the_kernels(tmp_path: Path) -> None:
    with patch(cache_dir=tmp_path, cache_enabled=True), pytest.raises(cpp_build.CppCompileError,
                       match=r"g\+\+ failed to compile the C\+\+ kernels kernel7 of graph"):
        cpp_build.compile_cpp("this is not C++",
                              "the C++ kernels kernel7 of graph 'forward'")
