"""Functionalization, read as text: the printed graph of a write through a view chain."""

from __future__ import annotations

import dataclasses

import torch
from aot_capture import capture
from ember.aot.functionalize import functionalize
from ember.runtime.ir import Program, print_graph


def _text(program: Program) -> str:
    graph = program.forward
    graph.nodes = [dataclasses.replace(n, source=None) for n in graph.nodes]
    return print_graph(graph, "forward", program.signature.inputs["forward"],
                       program.signature.outputs["forward"])


def _write_through_transpose(x, y):
    row = x[0]
    x.t()[1].mul_(y)
    return row + 1


EXPECTED = """\
graph forward(%in0: f32[3, 3]{3,1} cpu, %in1: f32[3]{1} cpu):
  %select: f32[3]{1} cpu = aten::select.int(%in0, 0, 0)
  %t: f32[3, 3]{1,3} cpu = aten::t.default(%in0)
  %select_1: f32[3]{3} cpu offset=1 = aten::select.int(%t, 0, 1)
  %mul: f32[3]{1} cpu = aten::mul.Tensor(%select_1, %in1)
  %select_scatter: f32[3, 3]{1,3} cpu = aten::select_scatter.default(%t, %mul, 0, 1)
  %permute: f32[3, 3]{3,1} cpu = aten::permute.default(%select_scatter, [1, 0])
  %select_2: f32[3]{1} cpu = aten::select.int(%permute, 0, 0)
  %add: f32[3]{1} cpu = aten::add.Tensor(%select_2, 1)
  return (%add, %permute)  [user_output, mutated_input in0]
"""


def test_write_through_a_view_chain_reads_as_scatter_and_replay() -> None:
    program = functionalize(capture(_write_through_transpose, torch.randn(3, 3),
                                    torch.randn(3)))
    # the write goes back through select_scatter and the inverse permutation; the view
    # taken before the write (%select) is replayed on the new base (%select_2)
    assert _text(program) == EXPECTED
