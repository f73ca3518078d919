"""The partitioner's output read as text: the forward/backward split of two small
training programs, printed with the IR printer (source locations left out) and compared
with ``golden/partition_<name>.txt``. Update with
``python packages/aot/tests/golden/regenerate.py`` and review the diff."""

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


SAMPLES: dict[str, Callable[[], Program]] = {"sin_mul_cos": sin_mul_cos, "mlp": mlp}


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
