"""A training program whose forward saves a Python value beside a tensor
(``ember.runtime.autograd``): tensors go through ``save_for_backward``, other values travel
on the node, and the backward graph gets them back in its placeholders' order."""

from __future__ import annotations

import torch
from ember.runtime.callable import ProgramCallable
from ember.runtime.ir import (
    Graph,
    InputSpec,
    Node,
    OutputKind,
    OutputSpec,
    Program,
    ScalarMeta,
    Signature,
    ValueRef,
    verify,
)
from ir_samples import output, tmeta


def scaled_square() -> Program:
    """y = x * x * n (n = x.size(0)); the forward saves n, then x; the backward is
    grad_x = tangent * 2 * x * n."""
    forward = Graph([
        Node("x", "placeholder", "x", meta=tmeta(3, requires_grad=True)),
        Node("n", "call", "aten::sym_size.int", (ValueRef("x"), 0), meta=ScalarMeta("int")),
        Node("xx", "call", "aten::mul.Tensor", (ValueRef("x"), ValueRef("x")), meta=tmeta(3)),
        Node("y", "call", "aten::mul.Tensor", (ValueRef("xx"), ValueRef("n")), meta=tmeta(3)),
        output(ValueRef("y"), ValueRef("n"), ValueRef("x")),
    ])
    backward = Graph([
        Node("n", "placeholder", "n", meta=ScalarMeta("int")),
        Node("x", "placeholder", "x", meta=tmeta(3)),
        Node("tangent", "placeholder", "tangent", meta=tmeta(3)),
        Node("two_x", "call", "aten::mul.Tensor", (ValueRef("x"), 2.0), meta=tmeta(3)),
        Node("scaled", "call", "aten::mul.Tensor", (ValueRef("two_x"), ValueRef("n")),
             meta=tmeta(3)),
        Node("gx", "call", "aten::mul.Tensor", (ValueRef("tangent"), ValueRef("scaled")),
             meta=tmeta(3)),
        output(ValueRef("gx")),
    ])
    aot = {"aliased_outputs": [], "differentiable_outputs": [0], "saved_bytes": 12,
           "recomputed": [], "save_everything": False, "extern_ops": []}
    saved = OutputSpec(OutputKind.SAVED_TENSOR)
    return Program(
        graphs={"forward": forward, "backward": backward},
        signature=Signature(
            inputs={"forward": [InputSpec("x")],
                    "backward": [InputSpec("n"), InputSpec("x"), InputSpec("tangent")]},
            outputs={"forward": [OutputSpec(), saved, saved],
                     "backward": [OutputSpec(OutputKind.GRADIENT, "x")]}),
        dialect="core-functional", metadata={"aot": aot})


def test_a_saved_python_value_comes_back_in_its_place() -> None:
    program = scaled_square()
    verify(program)
    fn = ProgramCallable(program)
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (y,) = fn([x])
    torch.testing.assert_close(y, 3 * x.detach() ** 2)
    assert y.grad_fn.saved_layout == [False, True]  # type: ignore[union-attr]
    assert y.grad_fn.saved_others == [3]  # type: ignore[union-attr]
    tangent = torch.tensor([1.0, -1.0, 0.5])
    (g,) = torch.autograd.grad(y, x, tangent)
    torch.testing.assert_close(g, tangent * 2 * x.detach() * 3)


def test_a_program_saving_only_tensors_saves_them_in_one_call() -> None:
    from test_double_backward import compiled

    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (y,) = compiled()([x])
    assert y.grad_fn.saved_layout is None  # type: ignore[union-attr]
    (g,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(g, 2 * x.detach())
