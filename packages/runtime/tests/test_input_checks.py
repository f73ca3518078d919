"""Compiled callables check their inputs before a raw pointer reaches a kernel.

A compiled program is saved to a file, loaded with ``load_artifact`` in a child process
(``ember.runtime`` only) and called with a wrong input: a meta tensor, a CPU tensor for a
program compiled for CUDA, a wrong dtype, rank or size. Each must be a ``TypeError``
naming the input, expected and got, never a segfault (which would kill the child, not
pytest). Inputs in another layout are copied into the traced one; graphs with symbolic
sizes accept any size inside their symbols' ranges and guards, check dtype and device,
and reject other sizes (or ranks) with a ``ShapeError`` naming the input, dim and the
range or guard. The launchers refuse meta tensors too, for wrappers that do not check
(hand-written ones).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from ember.runtime.compiled import load_artifact
from ember.runtime.ir import InputSpec, Program, SourceLocation, SymbolRange, TensorMeta, save
from ember.runtime.ir.graph import ShapeGuard
from ember.runtime.ir.symbolic import ShapeError
from ember.runtime.tracing import GraphRecorder


def _trace(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> Program:
    rec = GraphRecorder()
    fakes = [rec.add_input(t, InputSpec(f"in{i}")) for i, t in enumerate(inputs)]
    with rec:
        out = fn(*fakes)
    program = rec.finish([out])
    program.dialect = "core-functional"
    return program


def _symbolic(program: Program, size: int, symbol: str) -> Program:
    """``program`` with every dimension of extent ``size`` made the symbol ``symbol``,
    in [2, 16], with the guard ``symbol%2 == 0`` (from model.py:3)."""
    for n in program.forward.nodes:
        if isinstance(n.meta, TensorMeta):
            n.meta = dataclasses.replace(
                n.meta, sizes=tuple(symbol if s == size else s for s in n.meta.sizes))
    program.forward.symbols[symbol] = SymbolRange(2, 16, hint=size)
    program.forward.guards.append(ShapeGuard(
        f"{symbol}%2 == 0", SourceLocation("model.py", 3, "forward", "x.view(2, -1)")))
    return program


def _add_sin(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a + b).sin()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``cpu.ember``, ``cuda.ember`` (compiled for CUDA; Triton kernels) and
    ``symbolic.ember`` (symbolic sizes) of ``sin(a + b)`` for two float32 [4, 8] inputs."""
    pytest.importorskip("ember.inductor")
    from ember.inductor.compile import compile_program

    root = tmp_path_factory.mktemp("artifacts")
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    save(compile_program(_trace(_add_sin, x, y), {"strict": True}), root / "cpu.ember")
    save(compile_program(_trace(_add_sin, x, y), {"strict": True, "device": "cuda"}),
         root / "cuda.ember")
    symbolic = _symbolic(_trace(_add_sin, x, y), 4, "s0")
    save(compile_program(symbolic, {"strict": True}), root / "symbolic.ember")
    (root / "cache").mkdir(mode=0o700)
    return root


def _load(path: Path) -> Callable[..., list[Any]]:
    return load_artifact(path, trusted=True)  # compiled code: an explicit opt-in


_CHILD = """
import sys, torch
from ember.runtime.compiled import load_artifact
fn = load_artifact(sys.argv[1], trusted=True)
good = torch.randn(4, 8)
bad = BAD
try:
    fn(good, bad)
except (TypeError, ValueError, RuntimeError) as e:
    print("ERROR", type(e).__name__, e)
else:
    print("NO ERROR")
"""


def _run_child(code: str, *argv: str, cache: Path) -> str:
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache))
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                          text=True, timeout=300, env=env, check=False)
    assert proc.returncode == 0, f"child died (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(("file", "bad", "expected"), [
    ("cpu.ember", "torch.empty(4, 8, device='meta')",
     "arg1: expected a tensor on cpu, got one on meta"),
    ("cuda.ember", "torch.randn(4, 8)", "arg0: expected a tensor on cuda, got one on cpu"),
    ("cpu.ember", "torch.randn(4, 8, dtype=torch.float64)",
     "arg1: expected torch.float32 [4, 8], got torch.float64 [4, 8]"),
    ("cpu.ember", "torch.randn(32)", "arg1: expected torch.float32 [4, 8], got torch.float32 [32]"),
    ("cpu.ember", "torch.randn(4, 9)",
     "arg1: expected torch.float32 [4, 8], got torch.float32 [4, 9]"),
    ("cpu.ember", "[1.0] * 32", "arg1: expected a tensor, got list"),
    ("symbolic.ember", "torch.empty(4, 8, dtype=torch.float64)",
     "arg1: expected torch.float32 ['?', 8], got torch.float64 [4, 8]"),
    ("symbolic.ember", "torch.empty(4, 8, device='meta')",
     "arg1: expected a tensor on cpu, got one on meta"),
])
def test_a_wrong_input_is_a_clear_error(artifacts: Path, file: str, bad: str,
                                        expected: str) -> None:
    line = _run_child(_CHILD.replace("BAD", bad), str(artifacts / file),
                      cache=artifacts / "cache")
    assert line.startswith("ERROR TypeError ")
    assert f"compiled graph input {expected}" in line


def test_inputs_in_another_layout_are_copied_into_the_traced_one(artifacts: Path,
                                                                 monkeypatch: Any) -> None:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(artifacts / "cache"))
    fn = _load(artifacts / "cpu.ember")
    a = torch.randn(8, 4).t()                      # transposed: strides (1, 4)
    b = torch.randn(1, 8).expand(4, 8)             # stride 0 along dim 0
    c = torch.randn(4, 16)[:, ::2]                 # every other column
    for x, y in ((a, b), (b, c), (c, a)):
        assert not y.is_contiguous()
        torch.testing.assert_close(fn(x, y)[0], (x + y).sin())


def test_symbolic_sizes_accept_any_size_in_range(artifacts: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(artifacts / "cache"))
    fn = _load(artifacts / "symbolic.ember")
    for n in (2, 6, 16):
        x, y = torch.randn(n, 8), torch.randn(n, 8)
        torch.testing.assert_close(fn(x, y)[0], (x + y).sin())


def test_a_symbolic_call_checks_its_sizes_once_in_the_wrapper(artifacts: Path,
                                                               monkeypatch: Any) -> None:
    """In-range calls of a compiled symbolic program run no SymbolBinder (the wrapper's
    inline test is the only check); a bad size still raises the binder's ShapeError
    naming the input."""
    from ember.runtime.ir import symbolic

    monkeypatch.setenv("EMBER_CACHE_DIR", str(artifacts / "cache"))
    fn = _load(artifacts / "symbolic.ember")
    binds: list[int] = []
    real = symbolic.SymbolBinder.bind_sizes

    def counted(self: symbolic.SymbolBinder, sizes: Any) -> dict[str, int]:
        binds.append(len(sizes))
        return real(self, sizes)

    monkeypatch.setattr(symbolic.SymbolBinder, "bind_sizes", counted)
    for n in (2, 6, 16):
        x, y = torch.randn(n, 8), torch.randn(n, 8)
        torch.testing.assert_close(fn(x, y)[0], (x + y).sin())
    assert binds == []
    with pytest.raises(ShapeError, match=r"^input 'in1' dim 0: size 4, but symbol s0 is 6"):
        fn(torch.randn(6, 8), torch.randn(4, 8))
    assert binds == [2]  # the error message only


@pytest.mark.parametrize(("x", "y", "message"), [
    ((18, 8), (18, 8), "input 'in0' dim 0: size 18 is outside the range [2, 16] of symbol s0"),
    ((6, 8), (8, 8), ("input 'in1' dim 0: size 8, but symbol s0 is 6 (input 'in0' dim 0); "
                     "the graph needs them equal")),
    ((7, 8), (7, 8), ("guard 's0%2 == 0' fails for s0=7 from input 'in0' dim 0; it comes "
                     "from model.py:3 in forward: 'x.view(2, -1)'")),
    ((4, 8), (4, 8, 1), "input 'in1': expected 2 dims [s0, 8], got 3 dims (4, 8, 1)"),
])
def test_symbolic_sizes_outside_ranges_and_guards_are_refused(
        artifacts: Path, monkeypatch: Any, x: tuple[int, ...], y: tuple[int, ...],
        message: str) -> None:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(artifacts / "cache"))
    fn = _load(artifacts / "symbolic.ember")
    with pytest.raises(ShapeError) as raised:
        fn(torch.randn(x), torch.randn(y))
    assert str(raised.value) == message


_CPP_SOURCE = 'extern "C" void touch(float* x) { x[0] = 1.0f; }\n'

_KERNEL_CHILD = """
import sys, torch
from ember.runtime.compiled import cpp_launcher, triton_launcher
if sys.argv[1] == "cpp":
    entry = {"name": "touch", "lang": "cpp", "entry": "touch", "source": "k.cpp",
             "meta": {"arg_dtypes": ["float32"]}}
    kernel = cpp_launcher.load_kernel(entry, {"k.cpp": SOURCE.encode()})
else:
    entry = {"name": "touch", "lang": "triton", "entry": "touch", "source": "k.py",
             "meta": {"signature": {"x_ptr": "*fp32"}, "constexprs": {}, "grid": [1, 1, 1],
                      "num_warps": 4, "num_stages": 1}}
    kernel = triton_launcher.load_kernel(entry, {"k.py": b"import triton"})
try:
    kernel(torch.empty(4, device="meta"))
except TypeError as e:
    print("ERROR", e)
else:
    print("NO ERROR")
"""


@pytest.mark.parametrize("lang", ["cpp", "triton"])
def test_a_kernel_called_directly_refuses_a_meta_tensor(tmp_path: Path, lang: str) -> None:
    (tmp_path / "cache").mkdir(mode=0o700)
    code = _KERNEL_CHILD.replace("SOURCE", repr(_CPP_SOURCE))
    line = _run_child(code, lang, cache=tmp_path / "cache")
    assert line.startswith("ERROR ")
    assert "meta" in line and "touch" in line
