"""Writes autograd does not see (through ``detach()``, or under ``torch.no_grad()``):
later reads of the written tensor keep their gradient to it, as in eager, and reads of
the detached view take theirs from what was written into it.

Found by sweeping ``nn.Embedding(max_norm=...)``: its weight is renormalized through
``weight.detach()``, and the compiled module's weight got no gradient at all; and
``y = torch.zeros(..); y[1:3] = v``, whose ``v`` got none (torch records a ``detach``
of every factory result, and its replay after the write cut the gradient).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from aot_capture import compile_fn, compile_module


def _detach_write_of_activation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a * 2
    x.detach().mul_(3)
    return x * b


def _detach_write_of_input(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.detach().mul_(0.5)
    return a * b


def _detach_row_write(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.detach()[0].mul_(0.5)
    return a.sin() * b


def _no_grad_write_of_input(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        a.clamp_(-0.5, 0.5)
    return a * b


def _no_grad_write_of_activation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a + 1
    with torch.no_grad():
        x.mul_(2)
    return x * b


def _grad_value_into_zeros(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    y = torch.zeros(5, 4)
    y[1:4] = b
    y[0] = a[0]
    return y * a.sum()


def _grad_value_through_detach_read_base(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    d = a.detach()
    d[0] = b[0]  # a's reads: the data, a's own gradient; b's gradient: none through a
    return a * 2 + b.sum()


def _grad_value_through_detach_read_view(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a * 1
    d = x.detach()
    d[0] = b[0]
    x[1:].mul_(3)  # the detached view sees the data, keeps b's gradient
    return d * 2 + x


CASES: list[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = [
    _detach_write_of_activation, _detach_write_of_input, _detach_row_write,
    _no_grad_write_of_input, _no_grad_write_of_activation, _grad_value_into_zeros,
    _grad_value_through_detach_read_base, _grad_value_through_detach_read_view,
]


@pytest.mark.parametrize("fn", CASES, ids=[f.__name__ for f in CASES])
def test_hidden_write_keeps_eager_gradients(fn: Callable[..., torch.Tensor]) -> None:
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    program, run = compile_fn(fn, a.clone().requires_grad_(), b.clone().requires_grad_())
    assert not any(n.target.startswith("ember_aot::") for g in program.graphs.values()
                   for n in g.calls())
    want_a, want_b = a.clone().requires_grad_(), b.clone().requires_grad_()
    got_a, got_b = a.clone().requires_grad_(), b.clone().requires_grad_()
    want = fn(want_a, want_b)
    (got,) = run([got_a, got_b])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_a.detach(), want_a.detach())  # the write, copied back
    want.sum().backward()
    got.sum().backward()
    for g, w in ((got_a, want_a), (got_b, want_b)):
        assert g.grad is not None and w.grad is not None
        torch.testing.assert_close(g.grad, w.grad)


def test_embedding_max_norm_weight_gets_its_gradient() -> None:
    torch.manual_seed(0)
    eager = torch.nn.Embedding(10, 4, max_norm=1.0)
    compiled = copy.deepcopy(eager)
    idx = torch.tensor([[1, 2, 3], [2, 9, 1]])
    _, run = compile_module(compiled, idx)  # the capture runs on fakes: no write
    want = eager(idx)
    (got,) = run(idx)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(compiled.weight.detach(), eager.weight.detach())
    want.sum().backward()
    got.sum().backward()
    assert compiled.weight.grad is not None and eager.weight.grad is not None
    torch.testing.assert_close(compiled.weight.grad, eager.weight.grad)

