"""The partitioner's output read as text: the forward/backward split of small training
programs, static and with symbolic sizes (``dynamic_*``), printed with the IR printer
(source locations left out) and compared with ``golden/partition_<name>.txt``. Update
with ``python packages/aot/tests/golden/regenerate.py`` and review the diff."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from aot_capture import compile_fn, compile_module
from ember.runtime.ir import Program, print_program

GOLDEN = Path(__file__).parent / "golden"


def _sin_mul_cos(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.sin() * w).cos().sum()


def sin_mul_cos() -> Program:
    """Pointwise ops only: the min-cut saves the two inputs and recomputes the rest."""
    x, w = torch.randn(5, requires_grad=True), torch.randn(5, requires_grad=True)
    return compile_fn(_sin_mul_cos, x, w)[0]


def mlp() -> Program:
    """Linear, tanh, linear: the backward recomputes tanh from the saved matmul result
    and reads the parameters it needs as saved tensors."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    return compile_module(model, torch.randn(2, 4))[0]


def dynamic_mlp() -> Program:
    """The MLP with a symbolic batch: the same split over ``s0``; saved bytes are an
    expression."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    return compile_module(model, torch.randn(5, 4), dynamic={0: {0: (2, None)}})[0]


def dynamic_softmax() -> Program:
    """Softmax over a symbolic number of rows, times a weight, summed: the backward
    reads the saved softmax (which binds ``s0``)."""
    x, w = torch.randn(5, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    return compile_fn(lambda x, w: (x.softmax(-1) * w).sum(), x, w,
                      dynamic={0: {0: (2, None)}})[0]


def dynamic_layer_norm() -> Program:
    """layer_norm over rows of symbolic length ``s0`` (the normalized dim is static)."""
    x = torch.randn(6, 8, requires_grad=True)
    w, b = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    return compile_fn(lambda x, w, b: torch.nn.functional.layer_norm(x, [8], w, b).tanh(),
                      x, w, b, dynamic={0: {0: (2, None)}})[0]


def dynamic_cat() -> Program:
    """cat of two symbolic lengths: the output is ``s0+s1`` long, so its tangent binds
    neither symbol; the forward saves a size carrier ``[s0, s1, 0]`` for the backward's
    slices."""
    x, y = torch.randn(3, 4, requires_grad=True), torch.randn(5, 4, requires_grad=True)
    return compile_fn(lambda x, y: torch.cat([x, y]) * 2, x, y,
                      dynamic={0: {0: (2, None)}, 1: {0: (2, None)}})[0]


def dynamic_sum() -> Program:
    """``(x * 2).sum()``: the backward expands a scalar tangent back to ``[s0, 4]`` and
    saves nothing but the size carrier ``[s0, 0]`` (no bytes)."""
    x = torch.randn(6, 4, requires_grad=True)
    return compile_fn(lambda x: (x * 2).sum(), x, dynamic={0: {0: (2, None)}})[0]


SAMPLES: dict[str, Callable[[], Program]] = {
    "sin_mul_cos": sin_mul_cos, "mlp": mlp, "dynamic_mlp": dynamic_mlp,
    "dynamic_softmax": dynamic_softmax, "dynamic_layer_norm": dynamic_layer_norm,
    "dynamic_cat": dynamic_cat, "dynamic_sum": dynamic_sum,
}


def partition_text(program: Program) -> str:
    """The printed program without source locations (they name this file's lines) and
    without metadata (``aot`` statistics that other tests check)."""
    graphs = {name: dataclasses.replace(graph, nodes=[dataclasses.replace(n, source=None)
                                                      for n in graph.nodes])
              for name, graph in program.graphs.items()}
    return print_program(dataclasses.replace(program, graphs=graphs, metadata={}))


@pytest.mark.parametrize("name", list(SAMPLES))
def test_partition_matches_golden(name: str) -> None:
    expected = (GOLDEN / f"partition_{name}.txt").read_text(encoding="utf-8")
    program = SAMPLES[name]()
    assert set(program.graphs) == {"forward", "backward"}
    assert partition_text(program) == expected
