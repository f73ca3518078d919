"""Symbolic programs through the whole inductor with Triton kernels (run by Triton's
interpreter on CPU tensors): each program is compiled once and run at several sizes
(2, 17, 64, ...), against eager; the kernels take the sizes as arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.inductor.compile import compile_program
from ember.runtime.compiled import load_executor
from ember.runtime.ir import Program, parse_program

pytest.importorskip("triton")

HEADER = "program dialect=core-functional\n\n"

POINTWISE = HEADER + '''graph forward(%x: f32[s0, 64]{64,1} cpu, %w: f32[64]{1} cpu):
  symbols s0 in [2, inf] hint=8
  %a: f32[s0, 64]{64,1} cpu = aten::mul.Tensor(%x, %w)
  %b: f32[s0, 64]{64,1} cpu = aten::sigmoid.default(%a)
  %c: f32[s0, 64]{64,1} cpu = aten::add.Tensor(%b, %x)
  return (%c,)  [user_output]
'''

ROW_REDUCTIONS = HEADER + '''graph forward(%x: f32[s0, s1]{s1,1} cpu):
  symbols s0 in [2, inf] hint=8, s1 in [2, inf] hint=64
  %s: f32[s0]{1} cpu = aten::sum.dim_IntList(%x, [-1])
  %m: f32[s0]{1} cpu = aten::amax.default(%x, [-1])
  return (%s, %m)  [user_output, user_output]
'''

SOFTMAX = HEADER + '''graph forward(%x: f32[s0, s1]{s1,1} cpu):
  symbols s0 in [2, inf] hint=8, s1 in [2, 128] hint=64
  %y: f32[s0, s1]{s1,1} cpu = aten::_softmax.default(%x, -1, False)
  return (%y,)  [user_output]
'''

MLP = HEADER + '''graph forward(%x: f32[s0, 32]{32,1} cpu, %w1: f32[32, 64]{64,1} cpu, %b1: f32[64]{1} cpu, %w2: f32[64, 32]{32,1} cpu, %b2: f32[32]{1} cpu):
  symbols s0 in [2, inf] hint=16
  %h: f32[s0, 64]{64,1} cpu = aten::addmm.default(%b1, %x, %w1)
  %g: f32[s0, 64]{64,1} cpu = aten::gelu.default(%h)
  %o: f32[s0, 32]{32,1} cpu = aten::mm.default(%g, %w2)
  %p: f32[s0, 32]{32,1} cpu = aten::add.Tensor(%o, %b2)
  %r: f32[s0, 32]{32,1} cpu = aten::add.Tensor(%p, %x)
  return (%r,)  [user_output]
'''


def _compile(text: str) -> tuple[Program, Callable[..., list[Any]]]:
    program = parse_program(text)
    program.untrusted_origin = None  # built here, not read from a file
    with triton_for_cpu():
        compiled = compile_program(program, {"precompile": False, "strict": True})
    compiled.untrusted_origin = None
    run = load_executor(compiled, "forward")
    return compiled, lambda *xs: run(list(xs))


def _sources(compiled: Program) -> list[str]:
    return [v.decode() for k, v in compiled.files.items()
            if k.endswith(".py") and not k.endswith("wrapper.py")]


def _check(compiled: Program, outs: list[Any], expected: list[torch.Tensor]) -> None:
    assert compiled.metadata["fallbacks"] == {}
    assert len(outs) == len(expected)
    for a, e in zip(outs, expected):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)


SIZES = [2, 17, 64]


def test_pointwise_program_runs_at_several_sizes() -> None:
    compiled, run = _compile(POINTWISE)
    assert compiled.metadata["kernels"] == 1
    (src,) = _sources(compiled)
    assert ", s0, XBLOCK: tl.constexpr):" in src and "xnumel = 64*s0" in src
    w = torch.randn(64)
    for n in SIZES:
        x = torch.randn(n, 64)
        _check(compiled, run(x, w), [torch.sigmoid(x * w) + x])


def test_row_reductions_over_two_symbols() -> None:
    compiled, run = _compile(ROW_REDUCTIONS)
    assert compiled.metadata["kernels"] == 1
    (src,) = _sources(compiled)
    assert "for roffset in range(0, rnumel, RBLOCK):" in src  # s1 unbounded: looped
    for rows, cols in [(2, 2), (17, 33), (64, 64), (3, 300)]:
        x = torch.randn(rows, cols)
        _check(compiled, run(x), [x.sum(-1), x.amax(-1)])


def test_softmax_over_a_bounded_symbolic_row_is_persistent() -> None:
    compiled, run = _compile(SOFTMAX)
    assert compiled.metadata["kernels"] == 1
    (src,) = _sources(compiled)
    assert "for roffset" not in src and "rmask = rindex < rnumel" in src
    for rows, cols in [(2, 2), (17, 17), (64, 64), (5, 128)]:
        x = torch.randn(rows, cols)
        _check(compiled, run(x), [torch.softmax(x, -1)])


def test_mlp_with_fused_epilogues() -> None:
    compiled, run = _compile(MLP)
    assert compiled.metadata["kernels"] == 2  # gelu after the addmm; bias + residual
    w1, b1, w2, b2 = torch.randn(32, 64), torch.randn(64), torch.randn(64, 32), torch.randn(32)
    for n in SIZES:
        x = torch.randn(n, 32)
        expected = F.gelu(x @ w1 + b1) @ w2 + b2 + x
        _check(compiled, run(x, w1, b1, w2, b2), [expected])
