"""Graph passes (constant folding, CSE, DCE), checked on printed IR."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.passes import (
    PIPELINE,
    common_subexpression_elimination,
    constant_folding,
    dead_code_elimination,
    run_passes,
)
from ember.runtime.ir import Program, print_program
from helpers import trace


def traced(fn: Callable[..., Any], *inputs: torch.Tensor) -> Program:
    program = trace(fn, list(inputs))
    for g in program.graphs.values():
        for n in g.nodes:
            n.source = None
    return program


def _unused_and_repeated(x: torch.Tensor) -> torch.Tensor:
    x.cos()  # unused
    return x.sin() + x.sin()


def test_cse_merges_repeated_pure_calls() -> None:
    p = common_subexpression_elimination(traced(_unused_and_repeated, torch.randn(3)))
    assert print_program(p) == """\
program dialect=core-functional

graph forward(%in0: f32[3]{1} cpu):
  %cos: f32[3]{1} cpu = aten::cos.default(%in0)
  %sin: f32[3]{1} cpu = aten::sin.default(%in0)
  %add: f32[3]{1} cpu = aten::add.Tensor(%sin, %sin)
  return (%add)  [user_output]
"""


def test_dce_drops_unused_calls() -> None:
    p = dead_code_elimination(traced(_unused_and_repeated, torch.randn(3)))
    assert "aten::cos" not in print_program(p)
    assert print_program(p).count("aten::sin.default") == 2


def test_cse_keeps_random_ops_apart() -> None:
    p = traced(lambda x: torch.rand_like(x) + torch.rand_like(x), torch.randn(3))
    assert print_program(common_subexpression_elimination(p)).count("aten::rand_like") == 2


def test_cse_distinguishes_int_and_float_arguments() -> None:
    p = traced(lambda x: (x * 2) + (x * 2.0), torch.randn(3))
    assert print_program(common_subexpression_elimination(p)).count("aten::mul") == 2


def test_constant_folding_then_dce() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = torch.tensor([1.0, 2.0, 3.0])
        return x + (c * 2).exp()

    p = dead_code_elimination(constant_folding(traced(f, torch.randn(3))))
    assert print_program(p) == """\
program dialect=core-functional
tensor _folded.forward.exp: f32[3] cpu

graph forward(%in0: f32[3]{1} cpu):
  %exp: f32[3]{1} cpu = constant _folded.forward.exp
  %add: f32[3]{1} cpu = aten::add.Tensor(%in0, %exp)
  return (%add)  [user_output]
"""
    torch.testing.assert_close(p.tensors["_folded.forward.exp"],
                               torch.tensor([2.0, 4.0, 6.0]).exp())


def test_constant_folding_leaves_large_constants() -> None:
    big = torch.randn(100)
    p = constant_folding(traced(lambda x: x + big * 2, torch.randn(100)))
    assert "aten::mul.Tensor" in print_program(p)


def test_pipeline_is_an_explicit_named_list() -> None:
    assert [name for name, _ in PIPELINE] == [
        "constant_folding", "attention_to_sdpa", "common_subexpression_elimination",
        "dead_code_elimination", "layout_plan"]
    p = run_passes(traced(_unused_and_repeated, torch.randn(3)))
    text = print_program(p)
    assert text.count("aten::sin.default") == 1 and "aten::cos" not in text


def test_cse_keeps_signed_zero_arguments_apart() -> None:
    # -0.0 + -0.0 is -0.0 but -0.0 + 0.0 is 0.0: the runtime's CSE rule compares floats
    # by bit pattern (this pass used to merge the two adds)
    p = traced(lambda x: (x + 0.0, x + -0.0), torch.tensor([-0.0]))
    assert print_program(common_subexpression_elimination(p)).count("aten::add") == 2
