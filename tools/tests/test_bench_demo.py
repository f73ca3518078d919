"""The demo's fallback between Ember backends and its table (compilers faked: fast)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import demo
import pytest
import torch
from benchlib import compilers


def _fake_compilers(failing: set[str]) -> Callable[..., Any]:
    def compile_fn(compiler: str, fn: Any, ember_backend: str = "inductor",
                   mode: str | None = None, ember_options: Any = None,
                   dynamic: bool | None = None) -> Any:
        if compiler == "ember" and ember_backend in failing:
            raise NotImplementedError(f"{ember_backend} cannot do this yet")
        return fn

    return compile_fn


def test_falls_back_to_the_next_backend_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(compilers, "compile_fn", _fake_compilers({"inductor"}))
    rows, backend = demo.bench_with_fallback("mlp", torch.device("cpu"), suite="test")
    assert backend == "aot_eager"
    assert [r.compiler for r in rows] == ["eager", "torch", "ember[aot_eager]"]
    assert all(r.status == "ok" for r in rows) and rows[2].speedup is not None
    said = capsys.readouterr().out
    assert "Ember backend 'inductor' failed" in said and "falling back to 'aot_eager'" in said
    demo.print_table([("mlp", rows, backend)])
    table = capsys.readouterr().out
    assert "[aot_eager]" in table and "pass" in table


def test_no_working_backend_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compilers, "compile_fn",
                        _fake_compilers({"inductor", "aot_eager", "eager"}))
    rows, backend = demo.bench_with_fallback("rms_norm", torch.device("cpu"), suite="test")
    assert backend is None and rows[-1].status == "fail_to_run"
    assert "cannot do this yet" in rows[-1].error
