"""The loop-IR builder's common-subexpression keys: a float literal is keyed by the value
its dtype holds, a commutative op by its operands in sorted order; a kernel computing
GELU and its gradient computes ``erf`` once where each wrote one."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.loop_ir import Compute, Literal
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.scheduler import KernelStep, format_schedule, schedule
from helpers import compile_fn, trace

F32 = torch.float32


def test_literals_that_round_alike_are_one_value() -> None:
    b = BodyBuilder()
    # 1/sqrt(2) written two ways: one float32 value, two float64 values
    assert b.literal(0.7071067811865475, F32) == b.literal(0.7071067811865476, F32)
    f64 = torch.float64
    assert b.literal(0.7071067811865475, f64) != b.literal(0.7071067811865476, f64)
    # the sign of zero and NaN stay apart from their look-alikes
    assert b.literal(-0.0, F32) != b.literal(0.0, F32)
    assert b.literal(float("nan"), F32) == b.literal(float("nan"), F32)
    # the value emitted is the first one written
    (first,) = [s for s in b.stmts if isinstance(s, Literal) and s.dtype == F32
                and s.value > 0.7]
    assert first.value == 0.7071067811865475


def test_commutative_ops_are_keyed_by_sorted_operands() -> None:
    b = BodyBuilder()
    x, y = b.load("a", 0, F32), b.load("b", 0, F32)  # type: ignore[arg-type]
    assert b.compute("add", x, y) == b.compute("add", y, x)
    assert b.compute("mul", x, y) == b.compute("mul", y, x)
    assert b.compute("sub", x, y) != b.compute("sub", y, x)
    assert b.compute("truediv", x, y) != b.compute("truediv", y, x)


def test_gelu_and_its_gradient_compute_erf_once() -> None:
    def step(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        # GELU's forward and its gradient's CDF as their decompositions write them (the
        # constants differ in their last float64 digit, the sum's operands in order), as a
        # backward kernel that recomputes the forward computes both
        y = x * 0.5 * (1 + torch.erf(x * 0.7071067811865475))
        cdf = (torch.erf(x * 0.7071067811865476) + 1) * 0.5
        return y + g * cdf

    x, g = torch.randn(64), torch.randn(64)
    steps = schedule(GraphLowering(trace(step, [x, g])).run(), CppBackend())
    kernels = [s.kernel for s in steps if isinstance(s, KernelStep)]
    erfs = [c for k in kernels for c in k.body if isinstance(c, Compute) and c.op == "erf"]
    assert len(erfs) == 1, format_schedule(steps)
    _, run = compile_fn(step, x, g)
    torch.testing.assert_close(run(x, g)[0], step(x, g))
