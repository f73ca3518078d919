"""A Python number an op converts to its tensor's dtype (``fill_``, ``full``, ``clamp``,
``hardtanh``, ``scalar_tensor``): where eager's checked conversion raises ("value cannot
be converted to type uint8_t without overflow"), the op runs as an extern call and
raises as eager does. A kernel wrapped the number (``uint8.clamp(max=300)`` clamped
every element to 44, silently). ``scalar_fit.overflows`` is checked against eager's own
conversion over a grid of values and dtypes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from ember.inductor.lowering.scalar_fit import overflows
from ember.runtime.ir.contracts import CompileReport

sys.path.insert(0, str(Path(__file__).parent))

from helpers import compile_for  # noqa: E402

DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.bool)
VALUES = (0, -1, 127, 128, -128, -129, 255, 256, -255, -256, 300, 2**31, -(2**31) - 1,
          2**40, 0.5, -1.0, 255.0, 256.0, 1e6, 1e39, -1e39, float("inf"), float("nan"))


def _eager_raises(value: Any, dtype: torch.dtype) -> bool:
    try:
        torch.zeros(3, dtype=dtype).fill_(value)  # (one element takes an unchecked path)
    except RuntimeError as e:
        assert "without overflow" in str(e), e
        return True
    return False


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_overflows_is_eager_s_checked_conversion(dtype: torch.dtype) -> None:
    assert {v: overflows(v, dtype) for v in VALUES} == {
        v: _eager_raises(v, dtype) for v in VALUES}


CASES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], torch.dtype]] = {
    "clamp_max": (lambda x: x.clamp(max=300), torch.uint8),
    "clamp_both": (lambda x: x.clamp(-5, 300), torch.uint8),
    "clamp_min_wraps": (lambda x: x.clamp(min=-5), torch.uint8),  # eager: 251, no error
    "fill_wraps": (lambda x: torch.full_like(x, -1), torch.uint8),  # eager: 255
    "fill": (lambda x: torch.full_like(x, 200), torch.int8),
    "fill_half": (lambda x: torch.full_like(x, 1e6), torch.float16),
    "hardtanh": (lambda x: torch.ops.aten.hardtanh(x, -200, 5), torch.int8),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_overflowing_number_raises_as_eager_does(case: str, backend: str) -> None:
    fn, dtype = CASES[case]
    x = torch.arange(0, 100, 20).to(dtype)
    compiled, run = compile_for(fn, x, backend=backend)
    try:
        expected: Any = fn(x)
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match="without overflow"):
            run(x)
        assert "without overflow" in str(e)
        assert CompileReport.from_program(compiled).fallbacks  # the extern call raised
        return
    (got,) = run(x)
    assert torch.equal(got, expected)


def test_a_fitting_number_stays_in_the_kernel() -> None:
    x = torch.arange(5).to(torch.uint8)
    compiled, run = compile_for(lambda t: t.clamp(max=3), x, backend="cpp")
    assert not CompileReport.from_program(compiled).fallbacks
    assert torch.equal(run(x)[0], x.clamp(max=3))
