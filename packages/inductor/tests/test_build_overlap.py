"""Cold compile time (issue #17 item 5): a graph's kernels build while the next graph is
lowered, and ``EMBER_LOGS=stages`` times every stage of an inference compile."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from ember.inductor import compile as inductor_compile
from ember.inductor.codegen import build
from ember.runtime.compiled.parallel_build import BuildJob
from ember.runtime.config import patch
from ember.runtime.phases import last_compile_profile


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16),
                               torch.nn.GELU())


class _Events:
    """Which graph's C++ build began when, seen from the lowering of the backward graph."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.build_started = {"forward": threading.Event(), "backward": threading.Event()}
        self.build_threads: dict[str, int] = {}
        self.forward_built_before_backward_lowered: bool | None = None
        real_job, real_compile = build._cpp_job, inductor_compile._compile_graph_or_eager

        def cpp_job(source: Any, names: list[str], graph: str) -> BuildJob[object]:
            job = real_job(source, names, graph)

            def run() -> object:
                self.build_threads[graph] = threading.get_ident()
                self.build_started[graph].set()
                return job.build()

            return BuildJob(job.name, run)

        def compile_graph(program: Any, name: str, *args: Any) -> Any:
            if name == "backward":  # waits a while for the forward build to begin
                self.forward_built_before_backward_lowered = \
                    self.build_started["forward"].wait(timeout=5.0)
            return real_compile(program, name, *args)

        monkeypatch.setattr(build, "_cpp_job", cpp_job)
        monkeypatch.setattr(inductor_compile, "_compile_graph_or_eager", compile_graph)


def _train_once(tmp_path: Path, threads: int) -> None:
    import ember.frontend

    with patch(cache_dir=tmp_path, program_cache=False, compile_threads=threads):
        fast = ember.frontend.compile(_model(), options={"capture": "trace"})
        fast(torch.randn(4, 16)).sum().backward()


def test_the_forward_graph_builds_while_the_backward_graph_is_lowered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = _Events(monkeypatch)
    _train_once(tmp_path, threads=2)
    assert events.forward_built_before_backward_lowered is True
    assert set(events.build_threads) == {"forward", "backward"}
    assert threading.get_ident() not in events.build_threads.values()  # in the pool
    profile = last_compile_profile()
    assert profile is not None and profile.counts["cpp builds"] == 2


def test_with_one_build_thread_the_builds_run_after_the_last_graph_in_this_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = _Events(monkeypatch)
    _train_once(tmp_path, threads=1)
    assert events.forward_built_before_backward_lowered is False
    assert set(events.build_threads.values()) == {threading.get_ident()}


def test_stages_log_times_every_stage_of_an_inference_compile(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import ember.frontend

    with patch(cache_dir=tmp_path, program_cache=False, logs=frozenset({"stages"})):
        fast = ember.frontend.compile(_model())  # strict capture, inference: decompose
        with torch.no_grad():
            fast(torch.randn(4, 16))
    profile = last_compile_profile()
    assert profile is not None
    phases = ["capture", "program cache",
              "aot", "aot/functionalize", "aot/decompose", "aot/cleanup",
              "inductor", "inductor/passes", "inductor/lowering", "inductor/scheduling",
              "inductor/codegen", "inductor/kernel builds", "runtime load"]
    assert list(profile.phases) == phases
    assert profile.counts["cpp builds"] == 1
    table = capsys.readouterr().err.split("compile profile:")[-1]
    for name in phases:  # one row each: indented by depth, seconds, share, calls
        label = "  " * name.count("/") + name.rsplit("/", 1)[-1]
        assert re.search(rf"\n  {re.escape(label)} +\d+\.\d{{3}} +\d+\.\d% +1\n", table), name
