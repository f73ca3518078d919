"""Dropout in training end to end through ``ember.frontend.compile(backend="inductor")``:
the random ops run in the generated kernels (no fallbacks), the backward graph applies
the mask the forward drew, and a call is reproducible under ``torch.manual_seed``."""

from __future__ import annotations

import ember.frontend
import torch

P = 0.3
STRICT = {"strict": True}


def test_dropout_backward_uses_the_forward_mask() -> None:
    compiled = ember.frontend.compile(torch.nn.Dropout(P).train(), backend="inductor",
                                      options=STRICT)
    x = (torch.rand(128, 64) + 0.5).requires_grad_()  # no zeros: out == 0 is the mask
    torch.manual_seed(0)
    out = compiled(x)
    assert compiled.stats.fallbacks == 0
    g = torch.randn_like(out)
    out.backward(g)
    kept = out != 0
    assert abs((~kept).double().mean().item() - P) < 0.03
    torch.testing.assert_close(out, torch.where(kept, x.detach() / (1 - P), 0.0))
    assert x.grad is not None and torch.equal(x.grad != 0, kept)
    torch.testing.assert_close(x.grad, torch.where(kept, g / (1 - P), 0.0))

    torch.manual_seed(0)
    assert torch.equal(compiled(x), out)
    assert not torch.equal(compiled(x), out)


def test_linear_dropout_gradients_follow_the_mask() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(P)).train()
    compiled = ember.frontend.compile(model, backend="inductor", options=STRICT)
    x = torch.randn(64, 16)
    out = compiled(x)
    assert compiled.stats.fallbacks == 0
    g = torch.randn_like(out)
    out.backward(g)
    linear = model[0]
    with torch.no_grad():
        pre = linear(x)
    kept = out != 0
    torch.testing.assert_close(out, torch.where(kept, pre / (1 - P), 0.0), rtol=1e-5, atol=1e-5)
    scaled = torch.where(kept, g / (1 - P), 0.0)
    torch.testing.assert_close(linear.weight.grad, scaled.t() @ x, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(linear.bias.grad, scaled.sum(0), rtol=1e-4, atol=1e-4)
