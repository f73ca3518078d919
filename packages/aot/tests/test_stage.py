"""The aot stage as the pipeline and the command line see it: verification, the
serialization round trip at the boundary, and ``python -m ember.aot``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from aot_capture import capture, capture_module
from ember.aot.__main__ import main
from ember.aot.stage import AotStage
from ember.runtime.config import patch
from ember.runtime.ir import VerificationError, load, save, verify
from ember.runtime.pipeline import run_stages
from ember_testing.training import TransformerBlock, conv_bn


def _mutating(x, y):
    x[0].add_(y[0])
    return x.t(), (x * y).sum()


PROGRAMS = {
    "mutating": lambda: capture(_mutating, torch.randn(3, 4), torch.randn(3, 4)),
    "conv_bn": lambda: capture_module(conv_bn(), torch.randn(2, 3, 8, 8)),
    "transformer_block": lambda: capture_module(TransformerBlock(), torch.randn(2, 4, 32)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_output_is_core_functional_and_survives_serialization(name: str,
                                                               tmp_path: Path) -> None:
    program = PROGRAMS[name]()
    with patch(serialize_boundaries=True):
        result = run_stages(program, [AotStage()], {})
    verify(result, "core-functional")
    path = tmp_path / "out.ember"
    save(result, path)
    assert load(path) == result


def test_stage_refuses_a_program_in_another_dialect() -> None:
    program = capture(_mutating, torch.randn(3, 4), torch.randn(3, 4))
    program.dialect = "compiled"
    with pytest.raises(VerificationError):
        AotStage().run(program, {})


def test_unknown_option_is_named() -> None:
    program = capture(_mutating, torch.randn(3, 4), torch.randn(3, 4))
    with pytest.raises(ValueError, match="aot.save_everythin"):
        AotStage().run(program, {"aot.save_everythin": True})


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, target = tmp_path / "in.ember", tmp_path / "out.ember"
    save(capture_module(TransformerBlock(), torch.randn(2, 4, 32)), source)
    assert main([str(source), "-o", str(target), "--option", "aot.save_everything=true"]) == 0
    result = load(target)
    assert result.dialect == "core-functional"
    assert set(result.graphs) == {"forward", "backward"}
    assert result.metadata["aot"]["save_everything"] is True  # type: ignore[index]

    assert main([str(tmp_path / "missing.ember"), "-o", str(target)]) == 1
    assert "missing.ember" in capsys.readouterr().err


def test_python_dash_m(tmp_path: Path) -> None:
    source, target = tmp_path / "in.ember", tmp_path / "out.ember"
    save(capture(_mutating, torch.randn(3, 4), torch.randn(3, 4)), source)
    done = subprocess.run([sys.executable, "-m", "ember.aot", str(source), "-o", str(target)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert load(target).dialect == "core-functional"
