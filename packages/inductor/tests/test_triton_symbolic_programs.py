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
from ember.runtime.ir.contracts import COMPILED_KEY, CompiledMetadata, TritonLaunchMeta

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


SOFTMAX_KERNEL = """def fwd_kernel0(arg0_ptr, buf2_ptr, s0, s1, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    # fused: y
    s0 = s0 + tl.full([], 0, tl.int64)
    s1 = s1 + tl.full([], 0, tl.int64)
    xnumel = s0
    rnumel = s1
    xoffset = tl.program_id(0).to(tl.int64) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    rbase = tl.arange(0, RBLOCK)[None, :].to(tl.int64)
    x0 = xindex
    rindex = rbase
    rmask = rindex < rnumel
    xrmask = xmask & rmask
    r0 = rindex
    v0 = tl.load(arg0_ptr + (s1 * x0 + r0), mask=xrmask, other=0.0)
    v1_tile = tl.where(xrmask, v0, float('-inf'))
    v1 = tl.reduce(v1_tile, 1, _ember_max_nan)[:, None]
    v2 = (v0 - v1)
    v3 = tl.exp(v2)
    v4_tile = tl.where(xrmask, v3, 0)
    v4 = tl.reduce(v4_tile, 1, _ember_add)[:, None]
    v5 = (v3 / v4)
    tl.store(buf2_ptr + (s1 * x0 + r0), v5, mask=xrmask)
"""


def test_softmax_over_a_bounded_symbolic_row_is_persistent() -> None:
    """s1 <= 128: a block of 128 (twice the hint's 64, within PERSISTENT_SLACK) holds
    every row the range allows, so rows stay in registers; s0 is unbounded: 64-bit
    indexes."""
    compiled, run = _compile(SOFTMAX)
    assert compiled.metadata["kernels"] == 1
    (src,) = _sources(compiled)
    assert src.split("@triton.jit\n")[-1] == SOFTMAX_KERNEL
    (entry,) = CompiledMetadata.from_json(compiled.metadata[COMPILED_KEY]).graphs[
        "forward"].kernels
    assert isinstance(entry.meta, TritonLaunchMeta)
    assert entry.meta.constexprs == {"XBLOCK": 8, "RBLOCK": 128}
    assert entry.meta.grid == ("(s0+7)//8", 1, 1)
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
