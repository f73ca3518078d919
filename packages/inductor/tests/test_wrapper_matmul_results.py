"""The wrapper tests an extern call's result layout after the call (eager's kernel may
return another layout or dtype than traced), except for the public matmuls it calls
(``codegen/wrapper.OUT_VARIANTS``: ``torch.mm``, ``torch.addmm``, ``torch.bmm``,
``torch.baddbmm``), which return a new row-major tensor of their operands' dtype: a
training step of HF Llama ran 148 such tests a step."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from helpers import compile_and_load, trace


def _wrapper(compiled: object) -> str:
    source = compiled.files["forward/wrapper.py"]  # type: ignore[attr-defined]
    return source if isinstance(source, str) else source.decode()


def test_matmul_results_are_not_tested_after_the_call() -> None:
    a, b, c = torch.randn(6, 5), torch.randn(5, 7), torch.randn(3, 6, 5)
    bias = torch.randn(7)

    def fn(x: torch.Tensor, w: torch.Tensor, xb: torch.Tensor, v: torch.Tensor
           ) -> list[torch.Tensor]:
        return [x @ w, torch.addmm(v, x, w), torch.bmm(xb, w.expand(3, 5, 7))]

    compiled, run = compile_and_load(trace(fn, [a, b, c, bias]))
    source = _wrapper(compiled)
    assert "torch.mm(" in source and "torch.bmm(" in source, source
    assert "_layout(" not in source, source
    for got, want in zip(run(a, b, c, bias), fn(a, b, c, bias)):
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()


def test_other_extern_results_keep_their_test() -> None:
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)

    def fn(a: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return F.conv2d(a, k, padding=1)

    compiled, run = compile_and_load(trace(fn, [x, w]))
    source = _wrapper(compiled)
    assert "convolution" in source and "_layout(" in source, source
    torch.testing.assert_close(run(x, w)[0], fn(x, w))
