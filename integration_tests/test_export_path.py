"""``torch.export`` programs through Ember (issue #14 item 2).

* The capture corpus: each case exported, imported with ``import_exported`` and run by
  the interpreter (bit for bit like eager) and through ``aot_eager`` (within float
  tolerance): outputs, inputs after the call, module state.
* Every stage by file: ``import_exported`` -> ``save`` -> ``python -m ember.aot`` ->
  ``python -m ember.inductor`` -> ``load_artifact``, compared with eager — outputs,
  BatchNorm's running statistics (train mode) and a user input written in place; an
  export with ``dynamic_shapes`` compiles once and runs (also by
  ``python -m ember.runtime run --shape``) at every size its ``Dim`` ranges allow.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.export
from corpus import CASES, CorpusCase
from corpus.compare import clone_tree
from ember.frontend.pytree import flatten
from ember.runtime import import_exported
from ember.runtime.__main__ import main as runtime_cli
from ember.runtime.compiled import load_artifact
from ember.runtime.ir import OutputKind, Program, load, save
from ember.runtime.pipeline import compile_program

TOL = 1e-4


class _AsModule(torch.nn.Module):
    """A corpus function as the module torch.export takes."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [x for x in flatten(tree)[0] if isinstance(x, torch.Tensor)]


def _assert_tensors(actual: list[torch.Tensor], expected: list[torch.Tensor], what: str,
                    tol: float) -> None:
    assert len(actual) == len(expected), f"{what}: {len(actual)} != {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == e.dtype and a.shape == e.shape, f"{what}[{i}] meta differs"
        if tol == 0 or not e.is_floating_point():
            assert torch.equal(a, e), f"{what}[{i}] differs: max err {(a - e).abs().max()}"
        else:
            torch.testing.assert_close(a, e, atol=tol, rtol=tol, msg=f"{what}[{i}]")


@pytest.mark.parametrize("backend,tol", [("eager", 0.0), ("aot_eager", TOL)])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_case_exported_matches_eager(case: CorpusCase, backend: str,
                                            tol: float) -> None:
    torch.manual_seed(0)
    built = case.build()
    model = built if isinstance(built, torch.nn.Module) else _AsModule(built)
    args, kwargs = case.inputs()
    exported = copy.deepcopy(model)  # the program's buffers are this copy's
    program: Program = import_exported(
        torch.export.export(exported, clone_tree(args), clone_tree(kwargs)))
    fn = compile_program(program, backend=backend)
    for _ in range(2):  # the second call sees the state the first one wrote
        args_e, kwargs_e = clone_tree(args), clone_tree(kwargs)
        args_c, kwargs_c = clone_tree(args), clone_tree(kwargs)
        if case.random:
            torch.manual_seed(1234)
        expected = model(*args_e, **kwargs_e)
        if case.random:
            torch.manual_seed(1234)
        with torch.no_grad():
            actual = fn(_tensors((args_c, kwargs_c)))
        _assert_tensors(actual, _tensors(expected), "outputs", tol)
        _assert_tensors(_tensors((args_c, kwargs_c)), _tensors((args_e, kwargs_e)),
                        "inputs after the call", tol)
        _assert_tensors([program.tensors[k] for k, _ in model.named_buffers()],
                        [b for _, b in model.named_buffers()], "buffers after the call", tol)


class ConvBN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.bn(self.conv(x)))
        pooled = h.mean((2, 3))
        return self.fc(pooled), pooled


class Accumulate(torch.nn.Module):
    """Writes its user input ``acc`` and its buffer ``count`` in place."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))
        self.shift = torch.tensor(0.5)  # a lifted tensor constant

    def forward(self, x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(self.fc(x)) + self.shift
        acc.add_(y.sum(0))
        self.count.add_(x.shape[0])  # type: ignore[operator]
        out: torch.Tensor = y * 2
        return out


def _stage(module: str, src: Path, dst: Path, *extra: str) -> None:
    done = subprocess.run([sys.executable, "-m", module, str(src), "-o", str(dst), *extra],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{module} failed:\n{done.stderr}"


def _compile_by_files(model: torch.nn.Module, args: tuple[torch.Tensor, ...], tmp: Path,
                      *aot_options: str, dynamic_shapes: Any = None
                      ) -> Callable[..., list[Any]]:
    program = import_exported(torch.export.export(model, args, dynamic_shapes=dynamic_shapes))
    save(program, tmp / "exported.ember")
    options = [arg for o in aot_options for arg in ("--option", o)]
    _stage("ember.aot", tmp / "exported.ember", tmp / "functional.ember", *options)
    _stage("ember.inductor", tmp / "functional.ember", tmp / "compiled.ember")
    return load_artifact(tmp / "compiled.ember", trusted=True)


def _assert_same_buffers(model: torch.nn.Module, fn: Callable[..., list[Any]]) -> None:
    tensors = fn.program.tensors  # type: ignore[attr-defined]
    for name, buffer in model.named_buffers():
        torch.testing.assert_close(tensors[name], buffer, msg=name)


@pytest.mark.parametrize("mode", ["eval", "train", "train-joint"])
def test_conv_batchnorm_by_files(tmp_path: Path, mode: str) -> None:
    """``train`` compiles an inference program (``aot.training=false``) of the module in
    train mode: batch statistics, running statistics written; ``train-joint`` keeps aot's
    default, a joint forward/backward program (parameters require grad), run forward."""
    torch.manual_seed(0)
    model = ConvBN().train(mode != "eval")
    options = () if mode == "train-joint" else ("aot.training=false",)
    fn = _compile_by_files(copy.deepcopy(model), (torch.randn(2, 3, 8, 8),), tmp_path,
                           *options)
    assert ("backward" in fn.program.graphs) is (mode == "train-joint")  # type: ignore[attr-defined]
    for _ in range(2):  # the second call reads the statistics the first one wrote
        x = torch.randn(2, 3, 8, 8)
        with torch.no_grad():
            got = fn(x)
            expected = model(x)
        assert len(got) == 2
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    _assert_same_buffers(model, fn)
    assert int(fn.program.tensors["bn.num_batches_tracked"]) == (  # type: ignore[attr-defined]
        0 if mode == "eval" else 2)


def test_user_input_and_buffer_mutation_by_files(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Accumulate()
    fn = _compile_by_files(copy.deepcopy(model), (torch.randn(4, 6), torch.zeros(6)),
                           tmp_path, "aot.training=false")
    functional = load(tmp_path / "functional.ember")
    mutated = sorted(s.target or "" for s in functional.signature.outputs["forward"]
                     if s.kind == OutputKind.MUTATED_INPUT)
    assert mutated == ["acc", "b_count"]
    acc, acc_eager = torch.ones(6), torch.ones(6)
    for _ in range(2):
        x = torch.randn(4, 6)
        with torch.no_grad():
            (got,) = fn(x, acc)
            expected = model(x, acc_eager)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(acc, acc_eager)
    _assert_same_buffers(model, fn)
    assert int(fn.program.tensors["count"]) == 8  # type: ignore[attr-defined]


def test_dynamic_shapes_export_by_files_runs_every_size_in_range(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Batch in [2, 16] and a square image side in [4, 32]: one compiled artifact for
    every such size; a size outside the range is refused naming the input and range."""
    torch.manual_seed(0)
    model = ConvBN().eval()
    batch, side = torch.export.Dim("batch", min=2, max=16), torch.export.Dim("side", min=4,
                                                                             max=32)
    fn = _compile_by_files(copy.deepcopy(model), (torch.randn(2, 3, 8, 8),), tmp_path,
                           "aot.training=false",
                           dynamic_shapes=({0: batch, 2: side, 3: side},))
    symbols = fn.program.forward.symbols  # type: ignore[attr-defined]
    assert {name: (r.lower, r.upper) for name, r in symbols.items()} == {
        "s0": (2, 16), "s1": (4, 32)}
    for n, hw in ((2, 8), (5, 13), (15, 32)):
        x = torch.randn(n, 3, hw, hw)
        with torch.no_grad():
            got, expected = fn(x), model(x)
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match=r"^input 'x' dim 0: size 17 is outside the range "
                                         r"\[2, 16\] of symbol s0$"):
        fn(torch.randn(17, 3, 8, 8))
    run = ["run", str(tmp_path / "compiled.ember"), "--trusted", "--out",
           str(tmp_path / "out.safetensors"), "--shape"]
    assert runtime_cli([*run, "x=3,3,9,9"]) == 0
    assert runtime_cli([*run, "x=3,3,9,10"]) == 1
    assert capsys.readouterr().err == (
        "error: input 'x' dim 3: size 10, but symbol s1 is 9 (input 'x' dim 2); the graph "
        "needs them equal\n")
