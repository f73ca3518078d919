"""In-place ops on views under ``backend="inductor"`` (strict) give eager's results.

Regression tests for a fusion bug: a value computed under a scatter's mask (its loads
give 0 outside the mask) was reused as the unmasked base value outside the mask."""

from __future__ import annotations

from collections.abc import Callable

import ember.frontend as ef
import pytest
import torch


def _select_and_narrow(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y[:, 0].add_(1)
    y.narrow(1, 1, 2).mul_(3)
    return y


def _step_slices(x: torch.Tensor) -> torch.Tensor:
    y = x.exp()
    y[::2, 1::3].mul_(-1.5)
    y[1::2].add_(y[::2])
    return y + 1


def _diagonal(x: torch.Tensor) -> torch.Tensor:
    y = x[:, :5] * 3
    y.diagonal().add_(10)
    y.diagonal(1).mul_(0.5)
    return y.sin()


def _transpose(x: torch.Tensor) -> torch.Tensor:
    y = x - 1
    t = y.t()
    t[2].mul_(4)
    t[:, 1:3].add_(x.t()[:, 1:3])
    return y


def _as_strided(x: torch.Tensor) -> torch.Tensor:
    y = x.relu() + 0.5
    y.as_strided((2, 3), (5, 2), 1).mul_(7)
    return y


def _select_then_narrow_same_region(x: torch.Tensor) -> torch.Tensor:
    y = x.abs()
    y[1].mul_(2)
    y[1].narrow(0, 2, 3).sub_(1)
    y[:, -1].copy_(y[:, 0])
    return y * y


def _input_view_mutation(x: torch.Tensor) -> torch.Tensor:
    x[:, 1].mul_(2)
    x.narrow(0, 1, 2).add_(1)
    return x.sum(0)


CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "select_and_narrow": _select_and_narrow,
    "step_slices": _step_slices,
    "diagonal": _diagonal,
    "transpose": _transpose,
    "as_strided": _as_strided,
    "select_then_narrow_same_region": _select_then_narrow_same_region,
    "input_view_mutation": _input_view_mutation,
}


@pytest.mark.parametrize("name", list(CASES))
def test_view_mutation_matches_eager(name: str) -> None:
    fn = CASES[name]
    x = torch.randn(6, 7)
    expected_in = x.clone()
    expected = fn(expected_in)
    got_in = x.clone()
    got = ef.compile(fn, backend="inductor", options={"strict": True})(got_in)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_in, expected_in)  # mutations of the input too
