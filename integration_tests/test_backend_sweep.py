"""Regressions from sweeping common PyTorch code through the default pipeline (strict
capture, aot, inductor) against eager, forward values and gradients."""

from __future__ import annotations

from collections.abc import Callable

import ember.frontend as ef
import pytest
import torch


def _check_training(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> None:
    """``fn`` compiled gives eager's values and gradients of every input."""
    compiled = ef.compile(fn)
    eager_in = [t.clone().requires_grad_(t.is_floating_point() or t.is_complex())
                for t in inputs]
    ember_in = [t.clone().requires_grad_(t.is_floating_point() or t.is_complex())
                for t in inputs]
    want, got = fn(*eager_in), compiled(*ember_in)
    torch.testing.assert_close(got, want)
    assert got.requires_grad == want.requires_grad
    want.sum().backward()
    got.sum().backward()
    for i, (g, w) in enumerate(zip(ember_in, eager_in)):
        if w.requires_grad:
            assert g.grad is not None, f"input {i} got no gradient"
            torch.testing.assert_close(g.grad, w.grad, msg=lambda m: f"input {i}: {m}")


@pytest.mark.parametrize("fn", [
    lambda z, w: torch.view_as_real(z * w + z.exp()),
    lambda z, w: (z * z.conj()).real + w.abs(),
], ids=["view_as_real", "real"])
def test_complex_inputs_that_require_grad_get_gradients(
        fn: Callable[..., torch.Tensor]) -> None:
    """Only floating-point inputs made the aot stage build a backward: with complex ones
    the inductor's program was inference-only and its outputs did not require grad."""
    z = torch.randn(3, 4, dtype=torch.complex64)
    w = torch.randn(3, 4, dtype=torch.complex64)
    _check_training(fn, z, w)


def _assign_rows(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = torch.zeros(4, 3)
    y[1:3] = v
    return y * x


def test_rows_assigned_into_a_new_tensor_get_their_gradient() -> None:
    """torch records a ``detach`` of every factory result; replayed after the write into
    it, it cut the gradient of what was written (``v`` got none)."""
    _check_training(_assign_rows, torch.randn(4, 3), torch.randn(2, 3))
