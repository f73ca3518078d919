"""The compiled artifact: saved, loaded and run by ember-runtime alone (another
process, ember.inductor not importable); load_artifact with parameters from the file;
the stage entry point, the CLI, fallback accounting and logs, the kernel cache."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.compile import compile_program
from ember.runtime import load_artifact
from ember.runtime.config import patch
from ember.runtime.ir import (
    InputKind,
    InputSpec,
    Program,
    VerificationError,
    save,
)
from ember.runtime.stages import load_stage
from ember.runtime.tracing import GraphRecorder
from helpers import compile_and_load, trace

INDUCTOR_SRC = str(Path(__file__).resolve().parents[1] / "src")


def model_program() -> tuple[Program, torch.Tensor]:
    """A core-functional program with a parameter: softmax(x @ w.T + b) and x.sum()."""
    w, b = torch.randn(5, 8), torch.randn(5)
    rec = GraphRecorder()
    x = rec.add_input(torch.randn(3, 8), InputSpec("x"))
    fw = rec.add_input(w, InputSpec("w", InputKind.PARAMETER, "lin.weight"))
    fb = rec.add_input(b, InputSpec("b", InputKind.PARAMETER, "lin.bias"))
    with rec:
        y = torch.softmax(torch.addmm(fb, x, fw.t()), -1)
        s = (x * 2).sum()
    program = rec.finish([y, s])
    program.dialect = "core-functional"
    program.tensors["lin.weight"] = w
    program.tensors["lin.bias"] = b
    xin = torch.randn(3, 8)
    return program, xin


def _expected(program: Program, x: torch.Tensor) -> list[torch.Tensor]:
    w, b = program.tensors["lin.weight"], program.tensors["lin.bias"]
    return [torch.softmax(torch.addmm(b, x, w.t()), -1), (x * 2).sum()]


_CHILD = """
import importlib.util, sys
sys.path = [p for p in sys.path if p.rstrip('/') != {src!r}]
assert importlib.util.find_spec("ember.inductor") is None, "inductor still importable"
from safetensors.torch import load_file, save_file
from ember.runtime import load_artifact
fn = load_artifact({artifact!r}, trusted=True)
outs = fn(load_file({inputs!r})["x"])
save_file({{f"out{{i}}": o.contiguous() for i, o in enumerate(outs)}}, {outputs!r})
assert "ember.inductor" not in sys.modules
"""


def test_artifact_runs_in_another_process_without_inductor(tmp_path: Path) -> None:
    program, x = model_program()
    compiled = compile_program(program)
    artifact = tmp_path / "model.ember"
    save(compiled, artifact)
    save_file({"x": x}, tmp_path / "in.safetensors")
    script = _CHILD.format(src=INDUCTOR_SRC, artifact=str(artifact),
                           inputs=str(tmp_path / "in.safetensors"),
                           outputs=str(tmp_path / "out.safetensors"))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    outs = load_file(tmp_path / "out.safetensors")
    for i, want in enumerate(_expected(program, x)):
        torch.testing.assert_close(outs[f"out{i}"], want)


def test_load_artifact_takes_parameters_from_the_file(tmp_path: Path) -> None:
    program, x = model_program()
    save(compile_program(program), tmp_path / "m.ember")
    fn = load_artifact(tmp_path / "m.ember", trusted=True)
    got = fn(x)
    for g, want in zip(got, _expected(program, x)):
        torch.testing.assert_close(g, want)
    # every placeholder passed explicitly overrides the stored parameters
    w2, b2 = torch.randn(5, 8), torch.randn(5)
    got2 = fn(x, w2, b2)
    torch.testing.assert_close(got2[0], torch.softmax(torch.addmm(b2, x, w2.t()), -1))


def test_artifact_layout(tmp_path: Path) -> None:
    program, _ = model_program()
    compiled = compile_program(program)
    entry = compiled.metadata["compiled"]["graphs"]["forward"]  # type: ignore[index]
    assert compiled.dialect == "compiled"
    assert entry["wrapper"] == "forward/wrapper.py"
    assert {k["lang"] for k in entry["kernels"]} == {"cpp"}
    assert all(k["source"] in compiled.files for k in entry["kernels"])
    assert compiled.metadata["kernels"] == len(entry["kernels"]) == 2
    assert compiled.metadata["fallbacks"] == {}
    # the graph keeps its interface for the runtime
    assert [n.name for n in compiled.forward.placeholders] == ["x", "w", "b"]
    assert compiled.signature == program.signature


def test_an_artifact_missing_a_kernel_names_it_when_run(tmp_path: Path) -> None:
    """A trusted artifact edited so that its metadata lacks a kernel its wrapper calls:
    the call says which name the program does not define, not a bare NameError."""
    from ember.runtime.ir import IRFormatError

    program, x = model_program()
    compiled = compile_program(program)
    entry = compiled.metadata["compiled"]["graphs"]["forward"]  # type: ignore[index]
    removed = entry["kernels"].pop(0)["name"]
    save(compiled, tmp_path / "edited.ember")
    fn = load_artifact(tmp_path / "edited.ember", trusted=True)
    with pytest.raises(IRFormatError, match=f"uses '{removed}', which the program does "
                                            "not define"):
        fn(x)


def test_stage_entry_point_and_dialect_check() -> None:
    stage = load_stage("inductor")
    program, _ = model_program()
    compiled = stage.run(program, {})
    assert compiled.dialect == "compiled"
    program.dialect = "aten"
    with pytest.raises(VerificationError, match="core-functional"):
        stage.run(program, {})


def test_cli(tmp_path: Path) -> None:
    program, x = model_program()
    save(program, tmp_path / "in.ember")
    proc = subprocess.run(
        [sys.executable, "-m", "ember.inductor", str(tmp_path / "in.ember"), "-o",
         str(tmp_path / "out.ember"), "--device", "cpu"],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = load_artifact(tmp_path / "out.ember", trusted=True)(x)
    torch.testing.assert_close(got[0], _expected(program, x)[0])


def test_fallbacks_are_counted_and_logged(capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(4, 6)
    program = trace(lambda x: torch.cumsum(x, 1) + 1, [x])
    with patch(logs="fallbacks"):
        compiled, run = compile_and_load(program)
    assert compiled.metadata["fallbacks"] == {"aten::cumsum.default": 1}
    assert "aten::cumsum.default runs eagerly" in capsys.readouterr().err
    torch.testing.assert_close(run(x)[0], torch.cumsum(x, 1) + 1)


def test_output_code_log_prints_the_wrapper(capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(4, 6)
    with patch(logs="output_code"):
        compile_and_load(trace(lambda x: x.exp() + 1, [x]))
    err = capsys.readouterr().err
    assert "def call(args):" in err and 'extern "C" void kernel0' in err


def test_corrupt_cache_entry_is_a_miss_and_a_warning(tmp_path: Path) -> None:
    from ember.runtime.compiled import cpp_build

    x = torch.randn(4, 6)
    program = trace(lambda x: x * 3 - 1, [x])
    with patch(cache_dir=tmp_path):
        compiled = compile_program(program)
        (entry,) = list((tmp_path / "cpp").iterdir())
        lib = entry / "kernel.so"
        lib.write_bytes(lib.read_bytes()[:100])  # truncated
        with pytest.warns(cpp_build.CppCacheWarning):
            _, run = compile_and_load(program)
        torch.testing.assert_close(run(x)[0], x * 3 - 1)
        (entry / "manifest.json").write_text("{not json")
        with pytest.warns(cpp_build.CppCacheWarning):
            cpp_build.compile_cpp(next(iter(
                v for k, v in compiled.files.items() if k.endswith(".cpp"))).decode())
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _, run = compile_and_load(program)  # repaired: a clean hit
        torch.testing.assert_close(run(x)[0], x * 3 - 1)


def test_wrong_input_shape_is_a_clear_error() -> None:
    _, run = compile_and_load(trace(lambda x: x + 1, [torch.randn(4, 6)]))
    with pytest.raises(TypeError, match=r"expected torch.float32 \[4, 6\]"):
        run(torch.randn(3, 6))


def test_non_contiguous_input_at_run_time_is_relaid() -> None:
    _, run = compile_and_load(trace(lambda x: x * 2, [torch.randn(4, 6)]))
    x = torch.randn(6, 4).t()
    torch.testing.assert_close(run(x)[0], x * 2)


def test_concurrent_builders_of_one_kernel_agree(tmp_path: Path) -> None:
    import ctypes
    from concurrent.futures import ThreadPoolExecutor

    from ember.runtime.compiled import cpp_build

    source = 'extern "C" int ember_answer() { return 42; }\n'
    with patch(cache_dir=tmp_path):
        with ThreadPoolExecutor(3) as pool:
            paths = list(pool.map(lambda _: cpp_build.compile_cpp(source), range(3)))
        assert len(set(paths)) == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the entry is complete: a clean hit
            assert cpp_build.compile_cpp(source) == paths[0]
    assert ctypes.CDLL(str(paths[0])).ember_answer() == 42


def test_a_graph_that_fails_to_build_runs_eagerly_with_a_warning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.inductor import compile as driver
    from ember.inductor.codegen.cpp import backend

    monkeypatch.setattr(backend, "generate_function", lambda k: "this is not C++;")
    x = torch.randn(4, 6)
    program = trace(lambda x: x.exp() + 1, [x])
    with pytest.warns(driver.InductorFallbackWarning, match="runs eagerly|run eagerly"):
        compiled = compile_program(program)
    assert compiled.metadata["kernels"] == 0
    assert compiled.metadata["fallbacks"] == {"aten::add.Tensor": 1, "aten::exp.default": 1}
    torch.testing.assert_close(load_artifact_from(compiled)(x)[0], x.exp() + 1)
    with pytest.raises(Exception, match="g\\+\\+ failed"):
        compile_program(program, {"strict": True})


def load_artifact_from(program: Program):  # type: ignore[no-untyped-def]
    from ember.runtime.compiled import load_executor

    run = load_executor(program, "forward")
    return lambda *xs: run(list(xs))
