"""Running a file runs only what its dialect allows (issue 11, item 9).

Crafted files carry payloads that would create a marker file; each test asserts the
refusal (naming the opt-in) and that the marker is absent, and a control shows that the
payload does create the marker once the caller opts in.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import safetensors.torch
import torch
from ember.runtime.__main__ import main
from ember.runtime.callable import ProgramCallable
from ember.runtime.compiled import load_artifact
from ember.runtime.config import patch
from ember.runtime.executor import make_executor
from ember.runtime.interpreter import Interpreter, run_program
from ember.runtime.ir import IRFormatError, Program, load, save
from ember.runtime.ir.effects import EFFECTFUL_OPS, PURE_NAMESPACES, effect_of
from ember.runtime.ir.errors import UntrustedProgramError
from ember.runtime.pipeline import compile_program
from handbuilt import ProgramBuilder, wrapper_program

WRAPPER = "forward/wrapper.py"


def compiled_program(marker: Path) -> Program:
    """A ``compiled`` program whose wrapper creates ``marker`` when it is executed."""
    return wrapper_program(f"open({str(marker)!r}, 'w').close()\n"
                           "def call(args):\n"
                           "    return [args[0] * 2]\n")


def from_file_program(tmp_path: Path, marker: Path) -> Program:
    """An ``aten`` program that maps ``marker`` with ``aten::from_file(shared=True)``,
    which creates the file."""
    pb = ProgramBuilder()
    x = pb.input(torch.zeros(16, dtype=torch.uint8), name="x")
    scratch = str(tmp_path / "scratch")  # the builder runs the op once to get its meta
    mapped = pb.call("aten::from_file.default", scratch, True, 16, dtype=torch.uint8)
    program: Program = pb.finish(pb.call("aten::add.Tensor", x, mapped))
    nodes = program.forward.nodes
    i = next(i for i, n in enumerate(nodes) if n.target == "aten::from_file.default")
    nodes[i] = dataclasses.replace(nodes[i], args=(str(marker), True, 16))
    return program


@pytest.fixture
def artifact(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "pwned"
    path = tmp_path / "model.ember"
    save(compiled_program(marker), path)
    return path, marker


# ---- compiled artifacts are code ----------------------------------------------------------


def test_untrusted_artifact_is_refused_before_its_code_runs(
        artifact: tuple[Path, Path]) -> None:
    path, marker = artifact
    with pytest.raises(UntrustedProgramError,
                       match=r"holds executable code.*trusted=True.*EMBER_TRUST_ARTIFACTS=1"):
        load_artifact(path)
    assert not marker.exists()
    # the control: the payload runs once the caller trusts the file
    x = torch.randn(3)
    torch.testing.assert_close(load_artifact(path, trusted=True)(x)[0], x * 2)
    assert marker.exists()


def test_environment_variable_trusts_artifacts(artifact: tuple[Path, Path]) -> None:
    path, marker = artifact
    with patch(trust_artifacts=True):
        load_artifact(path)
    assert marker.exists()


@pytest.mark.parametrize("run", [
    lambda p: make_executor(p),
    lambda p: ProgramCallable(p),
], ids=["make_executor", "ProgramCallable"])
def test_loaded_compiled_program_is_refused_by_every_executor(
        artifact: tuple[Path, Path], run: object) -> None:
    path, marker = artifact
    program = load(path)
    assert program.untrusted_origin == str(path)
    with pytest.raises(UntrustedProgramError, match="EMBER_TRUST_ARTIFACTS"):
        run(program)  # type: ignore[operator]
    assert not marker.exists()
    run(load(path, trusted=True))  # type: ignore[operator]
    assert marker.exists()


def test_tampered_member_fails_its_sha256(artifact: tuple[Path, Path], tmp_path: Path) -> None:
    path, marker = artifact
    tampered = tmp_path / "tampered.ember"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tampered, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == f"files/{WRAPPER}":
                data = data.replace(b"* 2", b"* 3")
            dst.writestr(info, data)
    with pytest.raises(IRFormatError, match=r"member 'files/forward/wrapper.py' does not "
                                            r"match its SHA-256 in manifest.json"):
        load_artifact(tampered, trusted=True)
    assert not marker.exists()


def test_manifest_lists_every_member(artifact: tuple[Path, Path]) -> None:
    path, _ = artifact
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        members = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    assert manifest["sha256"] == {n: hashlib.sha256(d).hexdigest() for n, d in members.items()}
    assert set(members) == {"program.json", "tensors.safetensors", f"files/{WRAPPER}"}


def test_compiled_artifact_without_manifest_is_refused(
        artifact: tuple[Path, Path], tmp_path: Path) -> None:
    path, marker = artifact
    bare = tmp_path / "bare.ember"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bare, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "program.json":  # claim the schema before manifests
                doc = json.loads(data)
                doc["schema_version"] = "1.0"
                data = json.dumps(doc).encode()
            if info.filename != "manifest.json":
                dst.writestr(info.filename, data)
    with pytest.raises(IRFormatError, match="no manifest.json"):
        load_artifact(bare, trusted=True)
    assert not marker.exists()


def test_cli_run_refuses_untrusted_artifact(artifact: tuple[Path, Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path, marker = artifact
    x = torch.randn(3)
    safetensors.torch.save_file({"x": x}, tmp_path / "in.safetensors")
    args = ["run", str(path), "--inputs", str(tmp_path / "in.safetensors"),
            "--out", str(tmp_path / "out.safetensors")]
    assert main(args) == 1
    assert "--trusted" in capsys.readouterr().err
    assert not marker.exists()
    assert main([*args, "--trusted"]) == 0
    assert marker.exists()
    torch.testing.assert_close(safetensors.torch.load_file(tmp_path / "out.safetensors")["out0"],
                               x * 2)


def test_cli_verify_and_help_say_the_file_holds_code(
        artifact: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    path, marker = artifact
    assert main(["verify", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok\nnote: this file holds executable code")
    assert not marker.exists()
    helps = subprocess.run([sys.executable, "-m", "ember.runtime", "run", "--help"],
                           capture_output=True, text=True, timeout=120, check=True).stdout
    assert "executable code" in " ".join(helps.split())
    assert "executable code" in (load_artifact.__doc__ or "")


# ---- aten programs: effects outside the tensors ----------------------------------------------


def test_loaded_from_file_op_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "p.ember"
    save(from_file_program(tmp_path, marker), path)
    x = torch.zeros(16, dtype=torch.uint8)
    runners: list[Callable[[Program], object]] = [
        lambda p: run_program(p, [x]), lambda p: ProgramCallable(p)([x]),
        lambda p: make_executor(p)([x])]
    for run in runners:
        with pytest.raises(UntrustedProgramError,
                           match=r"node %v1: aten::from_file.default reads a file.*"
                                 r"trusted=True.*allow_effects=True"):
            run(load(path))
        assert not marker.exists()
    # the controls: the caller opts in
    run_program(load(path), [x], allow_effects=True)
    assert marker.exists()
    marker.unlink()
    run_program(load(path, trusted=True), [x])
    assert marker.exists()


def test_loaded_effectful_program_is_not_compiled_either(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "p.ember"
    save(from_file_program(tmp_path, marker), path)
    with pytest.raises(UntrustedProgramError, match="aten::from_file"):
        compile_program(load(path), backend="eager")
    assert not marker.exists()


def test_cli_run_refuses_effects_without_trusted(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "p.ember"
    save(from_file_program(tmp_path, marker), path)
    safetensors.torch.save_file({"x": torch.zeros(16, dtype=torch.uint8)},
                                tmp_path / "in.safetensors")
    args = ["run", str(path), "--inputs", str(tmp_path / "in.safetensors"),
            "--out", str(tmp_path / "out.safetensors")]
    assert main(["verify", str(path)]) == 0
    assert "aten::from_file.default reads a file" in capsys.readouterr().out
    assert main(args) == 1
    assert "aten::from_file" in capsys.readouterr().err
    assert not marker.exists()
    assert main([*args, "--trusted"]) == 0
    assert marker.exists()


@torch.library.custom_op("ember_trust_test::touch", mutates_args=())
def _touch(x: torch.Tensor, path: str) -> torch.Tensor:
    Path(path).touch()
    return x.clone()


def test_loaded_custom_operator_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3), name="x")
    program = pb.finish(pb.call("ember_trust_test::touch", x, str(tmp_path / "scratch")))
    node = program.forward.nodes[1]
    program.forward.nodes[1] = dataclasses.replace(node, args=(node.args[0], str(marker)))
    save(program, tmp_path / "p.ember")
    with pytest.raises(UntrustedProgramError, match="custom operator .*'ember_trust_test'"):
        Interpreter(load(tmp_path / "p.ember"))
    assert not marker.exists()
    Interpreter(load(tmp_path / "p.ember"), allow_effects=True).run(torch.randn(3))
    assert marker.exists()


def test_programs_built_in_memory_run_as_before(tmp_path: Path) -> None:
    marker = tmp_path / "mine"
    program = from_file_program(tmp_path, marker)
    assert program.untrusted_origin is None
    run_program(program, [torch.zeros(16, dtype=torch.uint8)])
    assert marker.exists()


def test_effect_table() -> None:
    assert set(PURE_NAMESPACES) == {"aten", "prims"}
    for op in EFFECTFUL_OPS:
        assert effect_of(f"{op}.default") == EFFECTFUL_OPS[op]
    assert effect_of("aten::from_file.default") is not None
    assert effect_of("aten::_print.default") is not None
    assert effect_of("c10d::allreduce_.default") is not None
    assert effect_of("debugprims::load_tensor.default") is not None
    assert effect_of("aten::add.Tensor") is None
    assert effect_of("prims::add.default") is None
    # TorchScript builtins torch.ops.aten resolves but the dispatcher does not have
    for builtin in ("aten::save.default", "aten::manual_seed.default",
                    "aten::set_grad_enabled.default", "aten::warn.default"):
        assert "TorchScript builtin" in str(effect_of(builtin)), builtin
    assert effect_of("aten::sym_size.int") is None
    assert effect_of("aten::_assert_async.msg") is None


def test_a_loaded_torchscript_builtin_is_refused_before_it_acts(tmp_path: Path) -> None:
    """``aten::set_grad_enabled`` and ``aten::manual_seed`` in a loaded file turned the
    caller's autograd off and reseeded its generator when the program ran."""
    pb = ProgramBuilder()
    x = pb.input(torch.randn(3), name="x")
    program = pb.finish(pb.call("aten::add.Tensor", x, x))
    node = program.forward.nodes[1]
    program.forward.nodes.insert(1, dataclasses.replace(
        node, name="off", target="aten::set_grad_enabled.default", args=(False,),
        kwargs={}, meta=None))
    save(program, tmp_path / "p.ember")
    with pytest.raises(UntrustedProgramError, match="set_grad_enabled.default is a "
                                                    "TorchScript builtin"):
        run_program(load(tmp_path / "p.ember"), [torch.randn(3)])
    assert torch.is_grad_enabled()
