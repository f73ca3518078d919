"""A backward pass inside a function compiled with the trace capture is refused with an
error naming the user's line (``trace_refusals.RefuseAutograd``). Before, it ran once at
capture time on fake tensors: the first call left a fake tensor as each parameter's
``.grad``, and later calls computed no gradient at all, silently."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch
from ember.frontend.trace import CaptureError


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(3, 1)


@pytest.mark.parametrize("how", ["tensor", "autograd.backward", "autograd.grad"])
def test_a_backward_pass_inside_a_trace_is_refused_at_its_line(how: str) -> None:
    model = _model()

    def step(x: torch.Tensor) -> torch.Tensor:
        loss = model(x).sum()
        if how == "tensor":
            loss.backward()
        elif how == "autograd.backward":
            torch.autograd.backward([loss])
        else:
            torch.autograd.grad(loss, [model.weight])
        return loss

    compiled = ef.compile(step, options={"capture": "trace"})
    with pytest.raises(CaptureError, match=r"could not trace .*step at .*test_trace_refusals"
                                           r"\.py:\d+ in step"):
        compiled(torch.ones(2, 3))
    assert model.weight.grad is None  # nothing ran: no fake tensor left behind


def test_the_forward_alone_is_traced_and_backward_outside_works() -> None:
    model = _model()
    compiled = ef.compile(lambda x: model(x).sum(), options={"capture": "trace"})
    for _ in range(2):
        model.zero_grad()
        compiled(torch.ones(2, 3)).backward()
        torch.testing.assert_close(model.weight.grad, torch.full((1, 3), 2.0))
