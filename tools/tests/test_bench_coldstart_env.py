"""The cold/warm compile workers' environment (tools/benchlib/coldstart.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from benchlib import coldstart


def test_workers_write_bytecode_and_use_their_own_caches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the warm worker imports Ember from .pyc files, as an installed package does
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = coldstart.worker_env(tmp_path)
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["EMBER_CACHE_DIR"] == str(tmp_path / "ember")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton")
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(coldstart.TOOLS_DIR)


def test_the_worker_runs_the_model_eagerly_before_its_timer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from benchlib import runner

    made: list[str] = []
    real = runner.make_step

    def spy(compiler: str, *args: object, **kwargs: object) -> object:
        made.append(compiler)
        return real(compiler, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "make_step", spy)
    job = coldstart.ColdJob(model="mlp", compiler="eager", ember_backend="inductor",
                            device="cpu", dtype="float32", suite="test", train=False)
    found = coldstart._worker(job)
    assert made == ["eager", "eager"], made  # the warm-up, then the timed one
    assert set(found) == {"first_call_s", "first_call_cpu_s", "second_call_s"}, found
