"""The accuracy criterion of docs/architecture.md as the harness implements it."""

from __future__ import annotations

import math

import pytest
import torch
from benchlib import accuracy


def _reference(
    dtype: torch.dtype = torch.float32, seed: int = 0
) -> tuple[accuracy.Reference, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    exact = torch.randn(1000, generator=gen, dtype=torch.float64)
    eager = (exact + 1e-6 * torch.randn(1000, generator=gen, dtype=torch.float64)).to(dtype)
    return accuracy.Reference(dtype, [eager], [exact]), exact


def test_identical_results_pass() -> None:
    ref, _ = _reference()
    result = accuracy.judge(ref, [ref.eager[0].clone()])
    assert result.passed and result.max_abs_error == 0.0 and result.label == "pass"


def test_error_far_beyond_tolerance_fails_with_reason() -> None:
    ref, _ = _reference()
    wrong = ref.eager[0] + 0.05
    result = accuracy.judge(ref, [wrong])
    assert not result.passed and result.label == "fail_accuracy"
    assert result.max_abs_error == pytest.approx(0.05, rel=1e-3)
    assert "rmse vs fp64" in result.reason and result.rmse_ratio > 2


def test_rmse_rule_accepts_outside_allclose_when_as_close_to_fp64_as_eager() -> None:
    # Eager is 1e-3 off fp64 everywhere (outside allclose's 1e-4 of anything); a compiled
    # result equally far from fp64, on the other side, is not allclose to eager but has
    # the same rmse against fp64: it passes (m = 2).
    exact = torch.linspace(-1, 1, 1000, dtype=torch.float64)
    eager = (exact + 1e-3).float()
    compiled = (exact - 1e-3).float()
    ref = accuracy.Reference(torch.float32, [eager], [exact])
    result = accuracy.judge(ref, [compiled])
    assert result.passed
    assert result.rmse_ratio == pytest.approx(1.0, rel=1e-3)
    # Three times as far as eager from fp64 fails: 3e-3 > 2 * 1e-3 + 1e-5.
    assert not accuracy.judge(ref, [(exact - 3e-3).float()]).passed


def test_low_precision_uses_looser_tolerance() -> None:
    assert accuracy.tolerance(torch.bfloat16) == (1e-2, 3.0)
    assert accuracy.tolerance(torch.float16) == (1e-2, 3.0)
    assert accuracy.tolerance(torch.float32) == (1e-4, 2.0)
    ref, _ = _reference(torch.bfloat16)
    assert accuracy.judge(ref, [ref.eager[0] + 0.001]).passed
    assert not accuracy.judge(ref, [ref.eager[0] + 0.5]).passed


def test_shape_dtype_count_and_nan_mismatches_fail() -> None:
    ref, _ = _reference()
    assert "eager has" in accuracy.judge(ref, [ref.eager[0][:10]]).reason
    assert "eager has" in accuracy.judge(ref, [ref.eager[0].double()]).reason
    assert "result tensors" in accuracy.judge(ref, []).reason
    with_nan = ref.eager[0].clone()
    with_nan[3] = math.nan
    assert "inf/nan" in accuracy.judge(ref, [with_nan]).reason


def test_reference_sees_input_mutations_and_fp64_copy() -> None:
    class AddInPlace(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x.add_(1.0)
            return x * 2

    x = torch.randn(8)
    ref = accuracy.compute_reference(AddInPlace(), (x,), train=False)
    assert len(ref.eager) == 2  # output, then the input after the call
    torch.testing.assert_close(ref.eager[1], x + 1.0)
    assert ref.fp64[0].dtype == torch.float64
    # A "compiled" function that forgets the mutation fails on the input comparison.
    forgot = accuracy.observe(lambda t: (t + 1.0) * 2, torch.nn.Identity(), (x,), train=False)
    assert not accuracy.judge(ref, forgot).passed


def test_training_observation_includes_parameter_and_input_gradients() -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    x = torch.randn(5, 4)
    values = accuracy.observe(layer, layer, (x,), train=True)
    # output, input after call, weight grad, bias grad, input grad (no buffers)
    assert [tuple(v.shape) for v in values] == [(5, 3), (5, 4), (3, 4), (3,), (5, 4)]
    torch.testing.assert_close(values[3], torch.full((3,), 5 / 15))


def test_buffers_are_compared_after_the_call() -> None:
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(3).train()
    x = torch.randn(6, 3)
    ref = accuracy.compute_reference(bn, (x,), train=True)
    # output, input, running_mean, running_var, num_batches_tracked, weight/bias/input grads
    assert len(ref.eager) == 8
    torch.testing.assert_close(ref.eager[2], 0.1 * x.mean(0))

    def forgets_running_stats(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.batch_norm(t, None, None, bn.weight, bn.bias, training=True)

    bn.reset_running_stats()
    observed = accuracy.observe(forgets_running_stats, bn, (x,), train=True)
    result = accuracy.judge(ref, observed)
    assert not result.passed and result.reason.startswith("result 2")
