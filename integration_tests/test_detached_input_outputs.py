"""An output that is a detached view of an input that requires grad (``x.detach()``,
``x[0].detach()``, ``x.t().detach()``) leaves the compiled call not requiring grad and
outside autograd, as in eager; it was rebuilt as ``x.as_strided(...)``, which requires
grad, so gradients flowed through a value the program had detached. The runtime rebuilds
it from the base's detached alias (``BoundAliasedOutput.detached``)."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch


def outputs(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.detach(), x[0].detach(), x.t().detach(), x[1], x * 2


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_detached_views_of_an_input_carry_no_grad(backend: str) -> None:
    compiled = ef.compile(outputs, backend=backend)
    x = torch.randn(3, 4, requires_grad=True)
    got, want = compiled(x), outputs(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
        assert g.requires_grad == w.requires_grad, (g, w)
        assert (g.grad_fn is None) == (w.grad_fn is None), (g.grad_fn, w.grad_fn)
    # the detached ones share the input's memory, as eager's do
    assert got[0].data_ptr() == x.data_ptr() and got[2].data_ptr() == x.data_ptr()
    (got[3].sum() + got[4].sum() + (got[0] * x).sum()).backward()
    x_ref = x.detach().clone().requires_grad_()
    ref = outputs(x_ref)
    (ref[3].sum() + ref[4].sum() + (ref[0] * x_ref).sum()).backward()
    assert x.grad is not None and x_ref.grad is not None
    torch.testing.assert_close(x.grad, x_ref.grad)


def test_without_grad_the_views_are_unchanged() -> None:
    compiled = ef.compile(outputs, backend="aot_eager")
    x = torch.randn(3, 4)
    for g, w in zip(compiled(x), outputs(x)):
        torch.testing.assert_close(g, w)
        assert not g.requires_grad
