"""The bound Triton launcher (``TritonKernel._bind``), with a stand-in for Triton's
``JITFunction``: the first launch of each grid/specialization goes through JIT, later
ones call the compiled binary's runner with the constexprs appended; a failure to bind
keeps every launch on the JIT path and is logged. (On a GPU the CUDA tests run it for
real.)"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ember.runtime.compiled.triton_kernel import TritonKernel, TritonKernelSpec


class FakeJit:
    arg_names = ["x_ptr", "out_ptr", "n", "XBLOCK"]

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.fail = fail

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def launch(*args: Any, **options: Any) -> None:
            self.calls.append(("jit", (grid, args, options)))
        return launch

    def warmup(self, *args: Any, grid: tuple[int, ...], **options: Any) -> Any:
        if self.fail:
            raise AttributeError("no warmup in this Triton")
        jit = self

        class Compiled:
            def __getitem__(self, g: tuple[int, ...]) -> Any:
                def runner(*a: Any) -> None:
                    jit.calls.append(("bound", (g, a)))
                return runner
        return Compiled()


def _kernel(fn: FakeJit) -> TritonKernel:
    spec = TritonKernelSpec("k", "", {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                            {"XBLOCK": 128})
    return TritonKernel(spec, fn, interpret=False)


def test_later_launches_call_the_bound_binary_with_constexprs_appended() -> None:
    fn = FakeJit()
    k = _kernel(fn)
    x, out = torch.zeros(64), torch.zeros(64)
    k.launch((4,), x, out, 64)
    k.launch((4,), x, out, 64)
    assert [c[0] for c in fn.calls] == ["jit", "bound"]
    assert fn.calls[1][1] == ((4, 1, 1), (x, out, 64, 128))
    # another specialization (a misaligned view, an integer that is 1): JIT, then bound
    k.launch((4,), x[1:], out[1:], 63)
    k.launch((4,), x, out, 1)
    k.launch((4,), x[1:], out[1:], 63)
    assert [c[0] for c in fn.calls] == ["jit", "bound", "jit", "jit", "bound"]


def test_a_triton_without_warmup_keeps_the_jit_path(capsys: pytest.CaptureFixture[str]) -> None:
    from ember.runtime.config import patch

    fn = FakeJit(fail=True)
    k = _kernel(fn)
    x, out = torch.zeros(64), torch.zeros(64)
    with patch(logs="cache"):
        for _ in range(3):
            k.launch((4,), x, out, 64)
    assert [c[0] for c in fn.calls] == ["jit"] * 3
    assert "launching through JIT each call" in capsys.readouterr().err
