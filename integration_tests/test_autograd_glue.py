"""The autograd node around a compiled training graph (``ember.runtime.autograd``): its
per-call paths give eager's gradients.

A step saves hundreds of values; when all are plain tensors they are saved in one call
(``saved_layout`` None; saved Python values: ``packages/runtime/tests/
test_autograd_saved_values.py``). Inputs the graph writes are checked against the saved
values only when the graph writes one, and the gradients go back to their inputs through
one index map unless an output got no gradient."""

from __future__ import annotations

from typing import Any

import ember.frontend as ef
import torch
from torch import nn


def _nodes(out: torch.Tensor) -> list[Any]:
    """The compiled graphs' autograd nodes behind ``out``."""
    found, seen, todo = [], set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if hasattr(node, "saved_layout"):
            found.append(node)
        todo.extend(n for n, _ in node.next_functions)
    return found


def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_a_step_saving_only_tensors_saves_them_in_one_call() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(5, 8)
    model(x).pow(2).sum().backward()
    expected = _grads(model)
    model.zero_grad(set_to_none=True)
    out = ef.compile(model)(x)
    (node,) = _nodes(out)
    assert node.saved_layout is None and len(node.saved_tensors) > 0
    out.pow(2).sum().backward()
    for got, want in zip(_grads(model), expected, strict=True):
        torch.testing.assert_close(got, want)


def test_an_input_written_after_it_was_saved_keeps_its_old_value() -> None:
    def f(w: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
        y = (w * buf).sum()
        buf.add_(1.0)
        return y

    w = torch.randn(4, requires_grad=True)
    buf = torch.arange(4.0)
    out = ef.compile(f)(w, buf)
    torch.testing.assert_close(buf, torch.arange(4.0) + 1)
    (gw,) = torch.autograd.grad(out, w)
    torch.testing.assert_close(gw, torch.arange(4.0))  # buf before the write


def test_an_output_without_gradient_leaves_its_inputs_gradient_none() -> None:
    def f(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (a * c).sin(), (b * c).cos()

    a, b, c = (torch.randn(3, requires_grad=True) for _ in range(3))
    first, _ = ef.compile(f)(a, b, c)
    first.sum().backward()
    assert a.grad is not None and c.grad is not None and b.grad is None
    torch.testing.assert_close(a.grad, c.detach() * torch.cos(a.detach() * c.detach()))
    a.grad = c.grad = None
    first, second = ef.compile(f)(a, b, c)
    (first.sum() + second.sum()).backward()
    assert a.grad is not None and b.grad is not None and c.grad is not None
    torch.testing.assert_close(b.grad, -c.detach() * torch.sin(b.detach() * c.detach()))
