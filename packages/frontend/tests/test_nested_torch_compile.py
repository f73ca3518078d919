"""A ``torch.compile``'d function or module called inside an Ember-compiled one (as
torchvision's ``roi_align`` fallback does with ``torch.compile(_roi_align)``).

The strict capture ran Dynamo's wrapper for real on fake tensors: Dynamo compiled the
inner function under Ember's recorder, failed, and left its frame hook set, so Dynamo
then tried to compile Ember's own code (an ``InternalTorchDynamoError`` or a PyTorch
internal assert). The wrapped function is now captured as itself, in the same graph,
as Dynamo treats a nested ``torch.compile``."""

from __future__ import annotations

import ember.frontend as ef
import torch
from torch import nn


def inner(x: torch.Tensor) -> torch.Tensor:
    return x.sin() + 1


compiled_inner = torch.compile(inner, backend="eager", dynamic=True)


def outer(x: torch.Tensor) -> torch.Tensor:
    return compiled_inner(x) * 2


def test_a_torch_compiled_function_is_captured_in_the_graph() -> None:
    compiled = ef.compile(outer, backend="eager")
    x = torch.randn(5)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), outer(x))
    assert compiled.stats.graphs == 1
    assert compiled.stats.graph_breaks == 0
    assert compiled.stats.compiles == 1
    # Ember's later compiles are not run under Dynamo
    other = ef.compile(lambda t: t.cos() * 3, backend="eager")
    torch.testing.assert_close(other(x), x.cos() * 3)


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.compile(nn.Linear(4, 3), backend="eager")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x).relu()


def test_a_torch_compiled_submodule_is_captured_with_its_gradients() -> None:
    torch.manual_seed(0)
    model = Outer()
    compiled = ef.compile(model, backend="aot_eager")
    x = torch.randn(2, 4)
    expected = model(x)
    expected.sum().backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    got = compiled(x)
    got.sum().backward()
    torch.testing.assert_close(got, expected)
    for p, g in zip(model.parameters(), grads):
        torch.testing.assert_close(p.grad, g)
    assert compiled.stats.graph_breaks == 0
