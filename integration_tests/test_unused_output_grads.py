"""Gradients of parameters that only an unused output reads stay None, as in eager: a
model returning two outputs (a sequence and a pooled summary, as HF's encoders do) whose
loss reads one of them. Eager leaves the other branch's ``.grad`` None, and an optimizer
skips such parameters, where a zero gradient would still move them (weight decay,
momentum). The compiled backward receives a zero tangent for the unused output and the
runtime returns None for every input whose gradient reads only such tangents."""

from __future__ import annotations

import ember.frontend as ef
import torch
from torch import nn


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.pool = nn.Linear(8, 4)
        self.shared = nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.body(x)) * self.shared
        return h, self.pool(h.mean(0, keepdim=True)) + self.shared[:4]


def _grads(model: nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}


def _pair() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    eager = TwoHeads()
    compiled = TwoHeads()
    compiled.load_state_dict(eager.state_dict())
    return eager, compiled


def test_a_parameter_only_the_unused_output_reads_gets_no_gradient() -> None:
    eager, model = _pair()
    x = torch.randn(3, 8)
    eager(x)[0].sum().backward()
    step = ef.compile(model)
    step(x)[0].sum().backward()
    want, got = _grads(eager), _grads(model)
    assert want["pool.weight"] is None and want["pool.bias"] is None
    assert got["pool.weight"] is None and got["pool.bias"] is None
    for name in ("body.weight", "body.bias", "shared"):
        torch.testing.assert_close(got[name], want[name])


def test_both_outputs_used_give_every_gradient() -> None:
    eager, model = _pair()
    x = torch.randn(3, 8)
    h, p = eager(x)
    (h.sum() + p.sum()).backward()
    h, p = ef.compile(model)(x)
    (h.sum() + p.sum()).backward()
    want, got = _grads(eager), _grads(model)
    for name, g in want.items():
        assert g is not None
        torch.testing.assert_close(got[name], g)


def test_the_other_output_alone() -> None:
    eager, model = _pair()
    x = torch.randn(3, 8)
    eager(x)[1].sum().backward()
    ef.compile(model)(x)[1].sum().backward()
    want, got = _grads(eager), _grads(model)
    for name, g in want.items():
        assert g is not None and got[name] is not None
        torch.testing.assert_close(got[name], g)
