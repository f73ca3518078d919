"""Symbolic programs on a CUDA GPU: each compiled once (Triton kernels taking the sizes as
arguments) and run at several sizes against eager, in float32 and bfloat16, including
sizes on both sides of Triton's divisibility-by-16 specialization. Skipped without CUDA;
run on the H200 test machine (``bash tools/gpu/h200_all.sh tests``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from ember.inductor.compile import compile_program
from ember.runtime.compiled import load_executor
from ember.runtime.ir import Program, parse_program

sys.path.insert(0, str(Path(__file__).parent))

from test_triton_symbolic_programs import MLP, POINTWISE, ROW_REDUCTIONS, SOFTMAX

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]

TOL = {"f32": 1e-4, "bf16": 2e-2}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def _compile(text: str, dtype: str) -> tuple[Program, Callable[..., list[Any]]]:
    program = parse_program(text.replace(" cpu", " cuda:0").replace("f32[", f"{dtype}["))
    program.untrusted_origin = None  # built here, not read from a file
    compiled = compile_program(program, {"strict": True})
    compiled.untrusted_origin = None
    run = load_executor(compiled, "forward")
    return compiled, lambda *xs: run(list(xs))


def _close(actual: list[Any], expected: list[torch.Tensor], dtype: str) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=TOL[dtype], atol=TOL[dtype])


def _randn(*shape: int, dtype: str) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=DTYPES[dtype])


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_pointwise_at_many_sizes(dtype: str) -> None:
    compiled, run = _compile(POINTWISE, dtype)
    assert compiled.metadata["fallbacks"] == {} and compiled.metadata["kernels"] == 1
    w = _randn(64, dtype=dtype)
    for n in (2, 16, 17, 64, 1000, 65536):
        x = _randn(n, 64, dtype=dtype)
        _close(run(x, w), [torch.sigmoid(x * w) + x], dtype)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_row_reductions_and_softmax_at_many_sizes(dtype: str) -> None:
    _, reduce = _compile(ROW_REDUCTIONS, dtype)
    _, softmax = _compile(SOFTMAX, dtype)
    for rows, cols in ((2, 2), (17, 33), (64, 64), (4096, 128), (3, 70000)):
        x = _randn(rows, cols, dtype=dtype)
        _close(reduce(x), [x.float().sum(-1).to(x.dtype), x.amax(-1)], dtype)
        if cols <= 128:
            _close(softmax(x), [torch.softmax(x, -1)], dtype)


def test_mlp_at_many_sizes() -> None:
    _, run = _compile(MLP, "f32")
    w1, b1 = _randn(32, 64, dtype="f32"), _randn(64, dtype="f32")
    w2, b2 = _randn(64, 32, dtype="f32"), _randn(32, dtype="f32")
    for n in (2, 17, 64, 4096):
        x = _randn(n, 32, dtype="f32")
        expected = F.gelu(x @ w1 + b1) @ w2 + b2 + x
        _close(run(x, w1, b1, w2, b2), [expected], "f32")
