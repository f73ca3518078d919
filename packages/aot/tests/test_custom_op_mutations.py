"""Custom operators that mutate their arguments (``mutates_args``), functionalized: the
operator runs on fresh clones, which are the written values from then on; a written
input is a ``MUTATED_INPUT`` output. Read as printed graphs, then run against eager."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from aot_capture import capture
from ember.aot.functionalize import functionalize
from ember.aot.op_effects import mutated_args
from ember.aot.pipeline import aot_compile
from ember.runtime.callable import ProgramCallable
from ember.runtime.ir import Program, print_graph, verify


@torch.library.custom_op("ember_aot_test::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, k: float) -> None:
    x.mul_(k)


@scale_.register_fake
def _(x: torch.Tensor, k: float) -> None:
    return None


@torch.library.custom_op("ember_aot_test::split_", mutates_args=("lo", "hi"))
def split_(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    lo.copy_(x.clamp(max=0))
    hi.copy_(x.clamp(min=0))
    return x.abs().sum()


@split_.register_fake
def _(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    return x.new_empty(())


def _text(program: Program) -> str:
    graph = program.forward
    graph.nodes = [dataclasses.replace(n, source=None) for n in graph.nodes]
    return print_graph(graph, "forward", program.signature.inputs["forward"],
                       program.signature.outputs["forward"])


def _intermediate(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    scale_(y, 3.0)
    return y + 1


def _input_and_view(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    s = split_(x, lo, hi[1:])  # writes an input and a view of another
    return s + lo.sum()


INTERMEDIATE = """\
graph forward(%in0: f32[4]{1} cpu):
  %mul: f32[4]{1} cpu = aten::mul.Tensor(%in0, 2)
  %clone: f32[4]{1} cpu = aten::clone.default(%mul)
  %scale_ = ember_aot_test::scale_.default(%clone, 3.0)
  %add: f32[4]{1} cpu = aten::add.Tensor(%clone, 1)
  return (%add)  [user_output]
"""

INPUT_AND_VIEW = """\
graph forward(%in0: f32[3]{1} cpu, %in1: f32[3]{1} cpu, %in2: f32[4]{1} cpu):
  %slice: f32[3]{1} cpu offset=1 = aten::slice.Tensor(%in2, 0, 1, 9223372036854775807)
  %clone: f32[3]{1} cpu = aten::clone.default(%in1)
  %clone_1: f32[3]{1} cpu = aten::clone.default(%slice)
  %split_: f32[]{} cpu = ember_aot_test::split_.default(%in0, %clone, %clone_1)
  %slice_scatter: f32[4]{1} cpu = aten::slice_scatter.default(%in2, %clone_1, 0, 1, 9223372036854775807, 1)
  %sum: f32[]{} cpu = aten::sum.default(%clone)
  %add: f32[]{} cpu = aten::add.Tensor(%split_, %sum)
  return (%add, %clone, %slice_scatter)  [user_output, mutated_input in1, mutated_input in2]
"""


def test_a_written_intermediate_is_a_fresh_clone() -> None:
    program = functionalize(capture(_intermediate, torch.randn(4)))
    assert _text(program) == INTERMEDIATE


def test_written_inputs_and_views_go_back_through_the_signature() -> None:
    program = functionalize(capture(_input_and_view, torch.randn(3), torch.randn(3),
                                    torch.randn(4)))
    assert _text(program) == INPUT_AND_VIEW


def test_the_aot_stage_output_is_core_functional_without_double_clones() -> None:
    # re-tracing brings the clone and the call back: the clone is not cloned again
    program = aot_compile(capture(_intermediate, torch.randn(4)))
    verify(program, "core-functional")
    assert _text(program) == INTERMEDIATE


def test_mutated_args_is_the_schema_rule_plus_unannotated_aten_writes() -> None:
    program = capture(_input_and_view, torch.randn(3), torch.randn(3), torch.randn(4))
    call = next(n for n in program.forward.nodes if n.target.startswith("ember_aot_test"))
    assert mutated_args(call) == (1, 2)


def _twice_in_a_row(x: torch.Tensor) -> torch.Tensor:
    scale_(x, 2.0)
    scale_(x, 3.0)
    return x * 1


@pytest.mark.parametrize("fn, shapes", [
    (_intermediate, [(4,)]),
    (_input_and_view, [(3,), (3,), (4,)]),
    (_twice_in_a_row, [(5,)]),
])
def test_values_and_written_inputs_match_eager(fn: Callable[..., Any],
                                               shapes: list[tuple[int, ...]]) -> None:
    inputs = [torch.randn(s) for s in shapes]
    mine = [t.clone() for t in inputs]
    run = ProgramCallable(aot_compile(capture(fn, *inputs)))
    got = run(mine)
    want = fn(*inputs)
    torch.testing.assert_close(got[0], want)
    for a, b in zip(mine, inputs):
        torch.testing.assert_close(a, b)


@torch.library.custom_op("ember_aot_test::bump", mutates_args=())
def bump(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@bump.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("ember_aot_test::bump_", mutates_args=("x",))
def bump_(x: torch.Tensor) -> None:
    x.add_(1)


@bump_.register_fake
def _(x: torch.Tensor) -> None:
    return None


def _bumped(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    bump_(y)
    return y


def test_a_registered_functional_twin_is_used_instead_of_a_clone() -> None:
    # bump_ has a functional twin with the same arguments (bump), as aten's add_/add
    program = functionalize(capture(_bumped, torch.randn(3)))
    text = _text(program)
    assert "ember_aot_test::bump.default(%mul)" in text and "clone" not in text
