"""Double backward through a compiled training program.

The compiled backward graph is not differentiable. Its gradients, taken with
``create_graph=True``, used to come back as constants (``requires_grad=False``: torch's
``once_differentiable`` only marks them when an incoming gradient requires grad), so a
gradient penalty added to the loss silently contributed no gradient. They now carry a
node that raises a ``RuntimeError`` naming the problem when a second backward reaches it;
first-order backward is unchanged."""

from __future__ import annotations

import pytest
import torch
from ember.runtime.autograd import DOUBLE_BACKWARD_MESSAGE
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


def square() -> Program:
    """y = x * x; the forward saves x, the backward is grad_x = tangent * 2 * x."""
    forward = Graph([
        Node("x", "placeholder", "x", meta=tmeta(3, requires_grad=True)),
        Node("y", "call", "aten::mul.Tensor", (ValueRef("x"), ValueRef("x")),
             meta=tmeta(3)),
        output(ValueRef("y"), ValueRef("x")),
    ])
    backward = Graph([
        Node("x", "placeholder", "x", meta=tmeta(3)),
        Node("tangent", "placeholder", "tangent", meta=tmeta(3)),
        Node("two_x", "call", "aten::mul.Tensor", (ValueRef("x"), 2.0), meta=tmeta(3)),
        Node("gx", "call", "aten::mul.Tensor", (ValueRef("tangent"), ValueRef("two_x")),
             meta=tmeta(3)),
        output(ValueRef("gx")),
    ])
    aot = {"aliased_outputs": [], "differentiable_outputs": [0], "saved_bytes": 12,
           "recomputed": [], "save_everything": False, "extern_ops": []}
    return Program(
        graphs={"forward": forward, "backward": backward},
        signature=Signature(
            inputs={"forward": [InputSpec("x")],
                    "backward": [InputSpec("x"), InputSpec("tangent")]},
            outputs={"forward": [OutputSpec(), OutputSpec(OutputKind.SAVED_TENSOR)],
                     "backward": [OutputSpec(OutputKind.GRADIENT, "x")]}),
        dialect="core-functional", metadata={"aot": aot})


def compiled() -> ProgramCallable:
    program = square()
    verify(program)
    return ProgramCallable(program)


def test_first_order_gradients_are_unchanged() -> None:
    fn = compiled()
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (y,) = fn([x])
    (g,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(g, 2 * x.detach())
    assert not g.requires_grad


def test_create_graph_alone_still_gives_the_gradient() -> None:
    fn = compiled()
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (y,) = fn([x])
    (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    torch.testing.assert_close(g.detach(), 2 * x.detach())


@pytest.mark.parametrize("leaf", [True, False])
def test_differentiating_the_gradient_raises(leaf: bool) -> None:
    fn = compiled()
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    inp = x if leaf else x * 1.0  # a non-leaf input: the error is found through x
    (y,) = fn([inp])
    (g,) = torch.autograd.grad(y.sum(), inp, create_graph=True)
    assert g.requires_grad  # not a constant that a penalty would silently drop
    with pytest.raises(RuntimeError, match="double backward through an Ember-compiled"):
        torch.autograd.grad(g.pow(2).sum(), x)


def test_a_gradient_penalty_in_the_loss_raises() -> None:
    fn = compiled()
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (y,) = fn([x])
    (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    (y2,) = fn([x])
    loss = y2.sum() + g.pow(2).sum()
    with pytest.raises(RuntimeError, match="not supported") as info:
        loss.backward()
    assert DOUBLE_BACKWARD_MESSAGE in str(info.value)
