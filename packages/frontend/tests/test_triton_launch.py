"""User Triton kernel launches are never dropped: one ``ember::triton_kernel`` node in
strict capture (0 graph breaks; the launch runs on real tensors when the graph runs), a
graph break for what cannot be captured (``kernel.warmup``). Trace capture records the
same node (``test_trace_triton.py``).

In-process tests replace ``JITFunction.run`` by a stub that does the kernel's work with
torch ops (no GPU is needed, nothing runs through Triton); the subprocess test runs real
kernels through Triton's CPU interpreter (``TRITON_INTERPRET=1``, read when Triton is
imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.frontend._torch import is_fake
from ember.frontend.bytecode import FullGraphError
from ember.runtime.config import patch

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
jit_module = pytest.importorskip("triton.runtime.jit")


@triton.jit  # type: ignore[untyped-decorator]
def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def,name-defined]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


tuned = triton.autotune(configs=[triton.Config({"BLOCK": 8})], key=["n"])(add_one)
# two configs: benchmarked on a GPU (test_real_kernels_on_the_gpu)
tuned_two = triton.autotune(configs=[triton.Config({"BLOCK": 32}),
                                     triton.Config({"BLOCK": 64})], key=["n"])(add_one)
heuristic = triton.heuristics({"BLOCK": lambda args: 8})(add_one)


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """``JITFunction.run`` does the kernel's work with torch; records, per launch,
    whether it saw a fake tensor."""
    seen: list[bool] = []

    def run(self: Any, x: torch.Tensor, out: torch.Tensor, n: int, *rest: Any,
            grid: Any, warmup: bool, **kwargs: Any) -> None:
        seen.append(is_fake(x) or is_fake(out))
        out.copy_(x + 1)

    monkeypatch.setattr(jit_module.JITFunction, "run", run)
    return seen


def launch_getitem(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    out = torch.empty_like(y)
    add_one[(1,)](y, out, y.numel(), BLOCK=8)
    return out * 3


def launch_run(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    out = torch.empty_like(y)
    add_one.run(y, out, y.numel(), BLOCK=8, grid=(1,), warmup=False)
    return out * 3


def launch_autotuned(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    out = torch.empty_like(y)
    tuned[lambda meta: (triton.cdiv(y.numel(), meta["BLOCK"]),)](y, out, y.numel())
    return out * 3


def launch_heuristic(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    out = torch.empty_like(y)
    heuristic[(1,)](y, out, y.numel())
    return out * 3


LAUNCHES = [launch_getitem, launch_run, launch_autotuned, launch_heuristic]


KERNEL_OF = {launch_getitem: "add_one", launch_run: "add_one", launch_autotuned: "tuned",
             launch_heuristic: "heuristic"}


@pytest.mark.parametrize("launch", LAUNCHES, ids=lambda f: f.__name__)
def test_strict_launch_is_one_graph_op(
    launch: Callable[..., torch.Tensor], launches: list[bool],
    capsys: pytest.CaptureFixture[str],
) -> None:
    compiled = ef.compile(launch, backend="eager")
    with patch(logs="graphs"):
        for i in range(3):
            x = torch.arange(4.0) + i
            torch.testing.assert_close(compiled(x), (x * 2 + 1) * 3)
    assert launches == [False] * 3  # every call launched, on real tensors
    assert compiled.stats.graph_breaks == 0 and compiled.stats.graphs == 1
    err = capsys.readouterr().err
    key = f"{__name__}:{KERNEL_OF[launch]}"
    assert f'= ember::triton_kernel.default("{key}", [%mul, %detach], [4, ' in err
    assert '\\"writes\\":[1]}")' in err  # out_ptr (tensor 1) is written, x_ptr only read
    assert "= aten::copy_.default(%detach, %triton_kernel.0)" in err
    assert f'file "user_kernels/{KERNEL_OF[launch]}_' in err


def test_explain_shows_no_break(launches: list[bool]) -> None:
    report = ef.explain(launch_getitem)(torch.arange(4.0))
    assert report.break_count == 0 and report.graph_count == 1
    assert "G['add_one'] is <add_one at" in report.guards  # the kernel object is guarded


def warmup_then_add(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    out = torch.empty_like(y)
    add_one.warmup(y, out, y.numel(), BLOCK=8, grid=(1,))
    return out * 0 + 1


def test_warmup_is_a_named_break(launches: list[bool]) -> None:
    compiled = ef.compile(warmup_then_add, backend="eager", fullgraph=True)
    with pytest.raises(FullGraphError, match="launch of the user Triton kernel add_one "
                       r"\(JITFunction\): warmup of the kernel"):
        compiled(torch.arange(4.0))
    assert launches == []


SCRIPT = """
import json
import torch, triton, triton.language as tl
import ember.frontend as ef

@triton.jit
def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)

tuned = triton.autotune(configs=[triton.Config({"BLOCK": 4})], key=["n"])(add_one)
heuristic = triton.heuristics({"BLOCK": lambda args: 8})(add_one)

def f_getitem(x):
    y = x * 2
    out = torch.empty_like(y)
    add_one[(triton.cdiv(y.numel(), 8),)](y, out, y.numel(), BLOCK=8)
    return out.sum(0) * 3

def f_run(x):
    y = x * 2
    out = torch.empty_like(y)
    add_one.run(y, out, y.numel(), BLOCK=8, grid=(2,), warmup=False)
    return out.sum(0) * 3

def f_autotune(x):
    y = x * 2
    out = torch.empty_like(y)
    tuned[lambda m: (triton.cdiv(y.numel(), m["BLOCK"]),)](y, out, y.numel())
    return out.sum(0) * 3

def f_heuristics(x):
    y = x * 2
    out = torch.empty_like(y)
    heuristic[(2,)](y, out, y.numel())
    return out.sum(0) * 3

results = {}
for f in (f_getitem, f_run, f_autotune, f_heuristics):
    compiled = ef.compile(f, backend="eager")
    ok = []
    for i in range(2):
        x = torch.arange(10.0).reshape(5, 2) + i
        ok.append(torch.equal(compiled(x), (x * 2 + 1).sum(0) * 3))
    results[f.__name__] = {"ok": ok, "breaks": compiled.stats.graph_breaks,
                           "graphs": compiled.stats.graphs}
print(json.dumps(results))
"""


def test_real_kernels_are_captured_and_correct(tmp_path: Path) -> None:
    script = tmp_path / "launch.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(results) == {"f_getitem", "f_run", "f_autotune", "f_heuristics"}
    for name, result in results.items():
        assert result == {"ok": [True, True], "breaks": 0, "graphs": 1}, (name, result)


def test_launch_inside_code_run_on_fake_tensors_is_refused(launches: list[bool]) -> None:
    """A ``nonstrict`` helper runs its Python on fake tensors during strict capture: a
    launch in it must not run there (it breaks and runs eagerly on real tensors)."""

    @ef.nonstrict
    def helper(y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(y)
        add_one[(1,)](y, out, y.numel(), BLOCK=8)
        return out

    def f(x: torch.Tensor) -> torch.Tensor:
        return helper(x * 2) * 3

    compiled = ef.compile(f, backend="eager")
    for _ in range(2):
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x), (x * 2 + 1) * 3)
    assert launches == [False, False]
    reasons = [b.reason for b in compiled.breaks]
    assert any("user Triton kernel add_one was launched on fake tensors" in r
               for r in reasons), reasons


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")


@pytest.mark.cuda
@needs_cuda
def test_real_kernels_on_the_gpu() -> None:
    """Compiled kernels on CUDA tensors (autotune benchmarks two configs): strict and
    trace capture record both launches (no break, never run on fake tensors' null data
    pointers) and every backend's results are right."""

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        out = torch.empty_like(y)
        add_one[(triton.cdiv(y.numel(), 64),)](y, out, y.numel(), BLOCK=64)
        out2 = torch.empty_like(y)
        tuned_two[lambda meta: (triton.cdiv(y.numel(), meta["BLOCK"]),)](
            out, out2, y.numel())
        return out2 * 3

    for capture in ("strict", "trace"):
        for backend in ("eager", "aot_eager", "inductor"):
            compiled = ef.compile(f, backend=backend, options={"capture": capture})
            for _ in range(2):
                x = torch.randn(1000, device="cuda")
                torch.testing.assert_close(compiled(x), (x * 2 + 2) * 3)
            assert compiled.stats.graph_breaks == 0, backend
            assert compiled.stats.graphs == 1, (capture, backend)
    torch.cuda.synchronize()
