"""``python -m ember.runtime``: show, verify, run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch
import torch
from ember.runtime.__main__ import main
from ember.runtime.ir import InputKind, OutputKind, OutputSpec, Program, save
from handbuilt import ProgramBuilder, mlp_program


def _save(program: Program, path: Path) -> Path:
    save(program, path)
    return path


@pytest.fixture
def mlp_file(tmp_path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    program, ex = mlp_program()
    return _save(program, tmp_path / "mlp.ember"), ex


def test_verify_ok(mlp_file: tuple[Path, dict[str, torch.Tensor]],
                   capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = mlp_file
    assert main(["verify", str(path), "--dialect", "core-functional"]) == 0
    assert capsys.readouterr().out == "ok\n"


def test_verify_reports_the_error_in_one_line(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3))
    path = _save(pb.finish(pb.call("aten::add_.Tensor", x, 1.0)), tmp_path / "inplace.ember")
    assert main(["verify", str(path)]) == 0
    capsys.readouterr()
    assert main(["verify", str(path), "--dialect", "core-functional"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: graph 'forward', node %v1 (aten::add_.Tensor): mutates")
    assert err.count("\n") == 1


def test_missing_and_corrupt_files_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", str(tmp_path / "absent.ember")]) == 1
    assert "absent.ember" in capsys.readouterr().err
    junk = tmp_path / "junk.ember"
    junk.write_bytes(b"not a zip")
    assert main(["show", str(junk)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_show_prints_the_text_form(mlp_file: tuple[Path, dict[str, torch.Tensor]],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = mlp_file
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "aten::addmm.default" in out and "aten::relu.default" in out


def test_run_binds_by_placeholder_name_and_defaults_parameters(
    mlp_file: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path
) -> None:
    path, ex = mlp_file
    x = torch.randn(2, 4)
    safetensors.torch.save_file({"x": x}, tmp_path / "in.safetensors")
    assert main(["run", str(path), "--inputs", str(tmp_path / "in.safetensors"),
                 "--out", str(tmp_path / "out.safetensors")]) == 0
    out = safetensors.torch.load_file(tmp_path / "out.safetensors")
    assert list(out) == ["out0"]
    torch.testing.assert_close(out["out0"], torch.relu(x @ ex["w"].T + ex["b"]) * 2)


def test_run_binds_by_position_and_applies_mutations(tmp_path: Path) -> None:
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3), name="x")
    buf = pb.input(torch.randn(3), InputKind.BUFFER, "buf", name="buf")
    new_buf = pb.call("aten::add.Tensor", buf, x)
    s = pb.call("aten::sum.default", new_buf)
    program = pb.finish(new_buf, s, kinds=[OutputSpec(OutputKind.MUTATED_INPUT, "buf"),
                                           OutputSpec()])
    path = _save(program, tmp_path / "mut.ember")
    x_val, buf_val = torch.randn(3), torch.randn(3)
    safetensors.torch.save_file({"arg0": x_val, "arg1": buf_val}, tmp_path / "in.safetensors")
    assert main(["run", str(path), "--inputs", str(tmp_path / "in.safetensors"),
                 "--out", str(tmp_path / "out.safetensors")]) == 0
    out = safetensors.torch.load_file(tmp_path / "out.safetensors")
    assert list(out) == ["out0"]
    torch.testing.assert_close(out["out0"], (x_val + buf_val).sum())


def test_run_rejects_missing_and_unused_inputs(
    mlp_file: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, _ = mlp_file
    inputs = tmp_path / "in.safetensors"
    safetensors.torch.save_file({"y": torch.randn(2, 4)}, inputs)
    args = ["run", str(path), "--inputs", str(inputs), "--out", str(tmp_path / "o")]
    assert main(args) == 1
    assert "no input for placeholder 'x': expected the key 'x' or 'arg0'" in (
        capsys.readouterr().err)
    safetensors.torch.save_file({"x": torch.randn(2, 4), "y": torch.randn(1)}, inputs)
    assert main(args) == 1
    assert "key(s) y that match no placeholder" in capsys.readouterr().err


def test_module_entry_point(mlp_file: tuple[Path, dict[str, torch.Tensor]]) -> None:
    path, _ = mlp_file
    done = subprocess.run([sys.executable, "-m", "ember.runtime", "verify", str(path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr
