"""ember.frontend.compile: decorator forms, options, errors, logs, stats, reset."""

from __future__ import annotations

from typing import Any

import ember.frontend as ef
import ember.frontend.compiled as compiled_module
import pytest
import torch
from ember.frontend.capture_modes import CAPTURE_MODES, CompileRequest
from ember.runtime.config import patch
from ember.runtime.stages import StageNotInstalledError


def test_decorator_forms() -> None:
    @ef.compile
    def plain(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    @ef.compile(backend="eager", mode="default")
    def configured(x: torch.Tensor) -> torch.Tensor:
        return x - 1

    x = torch.randn(3)
    assert torch.equal(configured(x), x - 1) and configured.stats.compiles == 1
    assert hasattr(plain, "stats") and plain.stats.compiles == 0  # compiled lazily
    assert plain.request.backend == "inductor"


def test_unknown_backend_mode_capture_and_dynamic() -> None:
    f = lambda x: x
    with pytest.raises(ValueError, match="unknown Ember backend 'nope'.*eager"):
        ef.compile(f, backend="nope")
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        ef.compile(f, backend="eager", mode="fast")
    with pytest.raises(ValueError, match="unknown capture mode 'magic'.*trace"):
        ef.compile(f, backend="eager", options={"capture": "magic"})
    ef.compile(f, backend="eager", dynamic=True)  # symbolic shapes: test_dynamic_*.py
    ef.compile(f, backend="eager", dynamic=False, fullgraph=True)


def test_backend_whose_stage_is_missing_names_the_package(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ember.frontend import api
    from ember.runtime import stages

    monkeypatch.setattr(api, "available_stages", dict)
    monkeypatch.setattr(stages, "available_stages", dict)
    with pytest.raises(StageNotInstalledError, match="pip install ember-aot"):
        ef.compile(lambda x: x, backend="aot_eager")


def test_untraceable_code_names_the_line() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # data-dependent control flow
            return x
        return -x

    with pytest.raises(ef.CaptureError) as info:
        ef.capture(f, torch.randn(3))
    message = str(info.value)
    assert "test_compile_api.py:" in message and "in f: if x.sum() > 0" in message
    assert "depends on a tensor's value" in message


def test_reset_drops_entries_and_stats() -> None:
    f = ef.compile(lambda x: x * 3, backend="eager")
    f(torch.randn(2))
    f(torch.randn(2))
    f.reset()
    assert f.stats == ef.CompileStats()
    f(torch.randn(2))
    assert (f.stats.compiles, f.stats.recompiles) == (1, 0)


def test_graphs_and_guards_logs(capsys) -> None:  # type: ignore[no-untyped-def]
    f = ef.compile(lambda x: x.cos(), backend="eager")
    with patch(logs="graphs,guards"):
        f(torch.randn(2))
    err = capsys.readouterr().err
    assert "aten::cos.default(%x)" in err
    assert "x.shape == (2,)" in err


def test_stats_read_kernels_and_fallbacks_from_the_final_program(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    real = compiled_module.compile_program

    def with_metadata(program: Any, backend: str, options: Any, mode: Any) -> Any:
        result = real(program, backend, options, mode)
        result.program.metadata["kernels"] = 4
        result.program.metadata["fallbacks"] = {"aten::sort.default": 2}
        return result

    monkeypatch.setattr(compiled_module, "compile_program", with_metadata)
    f = ef.compile(lambda x: x + 1, backend="eager")
    f(torch.randn(2))
    assert (f.stats.kernels, f.stats.fallbacks) == (4, 1)


def test_capture_mode_registry_hook() -> None:
    calls: list[CompileRequest] = []

    class Recorded:
        options = {"knob": (int,)}  # the options this capture mode reads

        def __init__(self, request: CompileRequest) -> None:
            calls.append(request)
            self.stats = ef.CompileStats()

        def __call__(self, *args: Any) -> str:
            return "custom"

        def reset(self) -> None:
            pass

    ef.register_capture_mode("test-mode", Recorded)
    try:
        g = ef.compile(lambda x: x, backend="eager", mode="default",
                       options={"capture": "test-mode", "knob": 1})
        assert g(1) == "custom"
        assert calls[0].options == {"knob": 1} and calls[0].mode == "default"
    finally:
        del CAPTURE_MODES["test-mode"]


def test_recompiles_log_names_the_failed_guard(capsys) -> None:  # type: ignore[no-untyped-def]
    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    f = ef.compile(scale, backend="eager")
    with patch(logs="recompiles"):
        f(torch.randn(2))
        f(torch.randn(2))
        f(torch.randn(2, dtype=torch.float64))
    err = capsys.readouterr().err
    assert err.count("recompiling") == 1
    assert "x.dtype == torch.float32 (got torch.float64)" in err
    assert f.__name__ == "scale" and f.__wrapped__ is scale


def test_compiled_function_called_while_capturing_runs_inline() -> None:
    inner = ef.compile(lambda x: x.sin() * 2, backend="eager")

    def outer(x: torch.Tensor) -> torch.Tensor:
        return inner(x) + 1

    compiled = ef.compile(outer, backend="eager")
    x = torch.randn(4)
    assert torch.equal(compiled(x), outer(x))
    assert inner.stats.compiles == 1  # from the eager call of outer, not from the capture
    program = ef.capture(outer, x)
    assert [n.target for n in program.forward.calls()] == [
        "aten::sin.default", "aten::mul.Tensor", "aten::add.Tensor"]
