"""``python -m ember.runtime``: show, verify, run."""

from __future__ import annotations

import dataclasses
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


def test_run_to_an_unwritable_path_is_one_line(
    mlp_file: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path,
    capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = mlp_file
    out = tmp_path / "missing" / "out.safetensors"
    assert main(["run", str(path), "--shape", "x=2,4", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out {out}: cannot be written") and "Traceback" not in err


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
    assert ("no input for placeholder 'x': expected the key 'x' or 'arg0' in the inputs "
            "file") in capsys.readouterr().err
    safetensors.torch.save_file({"x": torch.randn(2, 4), "y": torch.randn(1)}, inputs)
    assert main(args) == 1
    assert "key(s) y that match no placeholder" in capsys.readouterr().err


def test_run_refuses_inputs_of_another_dtype_or_shape_and_unreadable_files(
    mlp_file: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A static program ran on inputs of any shape or dtype (outputs of the wrong shape,
    exit 0); an inputs file that is no safetensors gave a traceback."""
    path, ex = mlp_file
    inputs = tmp_path / "in.safetensors"
    args = ["run", str(path), "--inputs", str(inputs), "--out", str(tmp_path / "o")]
    x = ex["x"]
    for wrong in (x.double(), x[:1], x.unsqueeze(0)):
        safetensors.torch.save_file({"x": wrong.contiguous()}, inputs)
        assert main(args) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: input 'x' for placeholder 'x' is ") and "takes" in err
    inputs.write_bytes(b"not safetensors")
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: --inputs {inputs}: not a readable safetensors file")
    assert err.count("\n") == 1


def test_run_verifies_the_program_first(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A program that ``verify`` rejects (a result index of -1 read row -1) ran."""
    from ember.runtime.ir import ValueRef

    pb = ProgramBuilder()
    x = pb.input(torch.randn(3, 4), name="x")
    program = pb.finish(pb.call("aten::relu.default", pb.call("aten::add.Tensor", x, x)))
    relu = program.forward.nodes[2]
    program.forward.nodes[2] = type(relu)(**{**relu.__dict__, "args": (
        ValueRef(relu.args[0].node, -1),)})
    path = _save(program, tmp_path / "bad.ember")
    assert main(["run", str(path), "--shape", "x=3,4", "--out", str(tmp_path / "o")]) == 1
    assert "reads result -1" in capsys.readouterr().err


def test_module_entry_point(mlp_file: tuple[Path, dict[str, torch.Tensor]]) -> None:
    path, _ = mlp_file
    done = subprocess.run([sys.executable, "-m", "ember.runtime", "verify", str(path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr


@pytest.fixture
def symbolic_file(tmp_path: Path) -> Path:
    from test_interpreter import _symbolic_program  # x: f32[s0, 4], y: f32[s1]

    return _save(_symbolic_program(), tmp_path / "symbolic.ember")


def test_run_takes_any_size_a_symbolic_program_allows(
    symbolic_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(symbolic_file)]) == 0
    assert "  symbols s0 in [2, 16] hint=4, s1 in [2, inf] hint=3\n" in capsys.readouterr().out
    out = tmp_path / "out.safetensors"
    for n, m in ((2, 3), (12, 40)):
        x = torch.randn(n, 4)
        safetensors.torch.save_file({"x": x}, tmp_path / "in.safetensors")
        assert main(["run", str(symbolic_file), "--inputs", str(tmp_path / "in.safetensors"),
                     "--shape", f"y={m}", "--seed", "3", "--out", str(out)]) == 0
        y = torch.randn(m, generator=torch.Generator().manual_seed(3))
        torch.testing.assert_close(safetensors.torch.load_file(out)["out0"],
                                   x.sum() * y)


@pytest.mark.parametrize(("shapes", "message"), [
    (["x=17,4", "y=3"], ("error: input 'x' dim 0: size 17 is outside the range [2, 16] of "
                        "symbol s0\n")),
    (["x=5,4", "arg1=3"], ("error: guard 's0%2 == 0' fails for s0=5 from input 'x' dim 0; "
                          "it comes from model.py:7 in forward: 'x.view(-1)'\n")),
    (["x=4,4,1", "y=3"], "error: input 'x': expected 2 dims [s0, 4], got 3 dims (4, 4, 1)\n"),
    (["x=4"], ("error: no input for placeholder 'y': expected the key 'y' or 'arg1' in the "
              "inputs file, or --shape y=D0,D1,...\n")),
    (["x=4,a"], ("error: --shape 'x=4,a': expected NAME=D0,D1,... with non-negative integer "
                "sizes (e.g. x=8,3,32)\n")),
    (["z=4"], ("error: --shape z=...: the graph 'forward' has no tensor placeholder 'z'; "
              "placeholders: x, y\n")),
])
def test_run_refuses_sizes_outside_the_ranges_and_guards_in_one_line(
    symbolic_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    shapes: list[str], message: str,
) -> None:
    args = ["run", str(symbolic_file), "--out", str(tmp_path / "o")]
    for spec in shapes:
        args += ["--shape", spec]
    assert main(args) == 1
    assert capsys.readouterr().err == message


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch without CUDA")
def test_a_program_for_a_device_torch_lacks_is_a_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It was torch's AssertionError with a traceback."""
    from ember.runtime.ir import TensorMeta

    pb = ProgramBuilder()
    x = pb.input(torch.randn(3), name="x")
    program = pb.finish(pb.call("aten::relu.default", x))
    node = program.forward.nodes[0]
    assert isinstance(node.meta, TensorMeta)
    node.meta = dataclasses.replace(node.meta, device=torch.device("cuda:0"))
    path = _save(program, tmp_path / "cuda.ember")
    assert main(["run", str(path), "--shape", "x=3", "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "CUDA" in err
