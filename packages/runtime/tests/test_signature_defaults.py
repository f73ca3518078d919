"""A graph without a signature entry returns user outputs only (docs/ir-contract.md).
A training program (forward and backward) whose forward has no output entry raised a
bare ``KeyError: 'forward'`` when it was made callable; it is now read with that default,
and the mismatch with its backward graph is a ``ValueError`` saying what differs."""

from __future__ import annotations

import pytest
import torch
from ember.runtime.callable import ProgramCallable
from ember.runtime.ir import (
    Graph,
    InputSpec,
    Node,
    OutputKind,
    OutputSpec,
    Program,
    Signature,
    ValueRef,
    verify,
)
from ir_samples import output, tmeta


def doubling(with_forward_outputs: bool) -> Program:
    """y = x * 2 with its backward (grad_x = grad_y * 2), in the core-functional form
    the aot stage writes."""
    forward = Graph([
        Node("x", "placeholder", "x", meta=tmeta(3, requires_grad=True)),
        Node("y", "call", "aten::mul.Tensor", (ValueRef("x"), 2.0), meta=tmeta(3)),
        output(ValueRef("y")),
    ])
    backward = Graph([
        Node("tangent", "placeholder", "tangent", meta=tmeta(3)),
        Node("gx", "call", "aten::mul.Tensor", (ValueRef("tangent"), 2.0), meta=tmeta(3)),
        output(ValueRef("gx")),
    ])
    outputs = {"backward": [OutputSpec(OutputKind.GRADIENT, "x")]}
    if with_forward_outputs:
        outputs["forward"] = [OutputSpec()]
    aot = {"aliased_outputs": [], "differentiable_outputs": [0], "saved_bytes": 0,
           "recomputed": [], "save_everything": False, "extern_ops": []}
    return Program(graphs={"forward": forward, "backward": backward},
                   signature=Signature(inputs={"forward": [InputSpec("x")],
                                               "backward": [InputSpec("tangent")]},
                                       outputs=outputs),
                   dialect="core-functional", metadata={"aot": aot})


@pytest.mark.parametrize("with_forward_outputs", [True, False])
def test_a_forward_without_output_specs_returns_user_outputs(
        with_forward_outputs: bool) -> None:
    program = doubling(with_forward_outputs)
    verify(program)
    fn = ProgramCallable(program)
    x = torch.ones(3, requires_grad=True)
    (y,) = fn([x])
    y.sum().backward()
    torch.testing.assert_close(y, torch.full((3,), 2.0))
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))


def test_a_backward_that_does_not_fit_the_default_is_a_value_error() -> None:
    program = doubling(False)
    program.metadata["aot"]["differentiable_outputs"] = []
    verify(program)
    with pytest.raises(ValueError, match="backward graph takes 1 inputs, but the forward "
                                         "graph saves 0 values and has 0 differentiable"):
        ProgramCallable(program)
