"""A 0-dim tensor passed where an op takes a Scalar (``p.add_(g, alpha=-lr)`` with ``lr`` a
tensor, as torch.optim.SGD/RMSprop/Adagrad/Rprop do with ``lr=torch.tensor(...)``) is
read on the host by torch's argument parser; on a fake tensor that gives a data-dependent
SymFloat, and recording failed with "got a symbolic value zuf0 (SymFloat)". The recorder
now records such ops as tensor ops reading the tensor (tracing_scalars.py), so the graph
follows the tensor's value at every run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from ember.runtime.interpreter import run_program
from ember.runtime.ir import InputSpec, Program, print_graph, verify
from ember.runtime.tracing import GraphRecorder, RecordingError


def record(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> Program:
    rec = GraphRecorder(dynamic=True)
    fakes = [rec.add_input(x, InputSpec(f"x{i}")) for i, x in enumerate(inputs)]
    with rec:
        out = fn(*fakes)
    program = rec.finish([out])
    verify(program)
    return program


CASES: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add_alpha": lambda p, g, lr: p.clone().add_(g, alpha=-lr),
    "add_out_of_place": lambda p, g, lr: torch.add(p, g, alpha=lr),
    "sub_alpha": lambda p, g, lr: p.clone().sub_(g, alpha=lr),
    "addcdiv_value": lambda p, g, lr: p.clone().addcdiv_(g, g.abs() + 1, value=-lr),
    "addcmul_value": lambda p, g, lr: torch.addcmul(p, g, g, value=lr),
    "full_like": lambda p, g, lr: torch.full_like(p, lr) + g,
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_tensor_scalar_is_read_from_the_tensor_at_every_run(name: str) -> None:
    fn = CASES[name]
    p, g = torch.randn(4, 3), torch.randn(4, 3)
    program = record(fn, p, g, torch.tensor(0.5))
    text = print_graph(program.forward)
    assert "_local_scalar_dense" not in text
    for value in (0.5, 0.125, -3.0):  # the same graph, other values of the tensor
        lr = torch.tensor(value)
        (got,) = run_program(program, [p, g, lr])
        torch.testing.assert_close(got, fn(p, g, lr))


def test_a_scalar_of_an_op_without_a_rule_is_still_refused() -> None:
    p = torch.randn(4)
    with pytest.raises(RecordingError, match="symbolic value"):
        record(lambda p, lr: torch.nn.functional.leaky_relu(p, -lr), p,
               torch.tensor(0.5))


def recorded_alpha(value: Any) -> str:
    return print_graph(record(lambda p, g: p.add(g, alpha=value), torch.ones(2),
                              torch.ones(2)).forward)


def test_a_python_number_is_still_a_constant() -> None:
    assert "alpha=0.5" in recorded_alpha(0.5)

