"""bfloat16/float16 pointwise chains compute in float32 and round each op's result to
the narrow dtype, as eager does; for ops whose result the narrow dtype holds exactly
(neg, abs, sign, max/min, where: ``builder.EXACT_IN_NARROW``) the round trip is left out.
Results stay bitwise eager's, NaN, infinities and -0 included."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.lowering.builder import BodyBuilder
from helpers import compile_fn


def _special(dtype: torch.dtype) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(512).to(dtype)
    x[:6] = torch.tensor([float("nan"), -0.0, 0.0, float("inf"), float("-inf"), 3.0e38
                          if dtype == torch.bfloat16 else 6.0e4]).to(dtype)
    return x


def _bitwise(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype
    same = got.view(torch.int16) == want.view(torch.int16)
    assert bool((same | (got.isnan() & want.isnan())).all())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_exact_ops_skip_the_round_trip_and_match_eager_bitwise(dtype: torch.dtype) -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = torch.relu(-(x.abs())) + torch.maximum(x, y).neg().sign()
        return torch.where(x > 0, z, y.abs()) * 3

    x, y = _special(dtype), _special(dtype).flip(0)
    compiled, run = compile_fn(f, x, y)
    _bitwise(run(x, y)[0], f(x, y))
    (source,) = [v.decode() for k, v in compiled.files.items() if k.endswith(".cpp")]
    body = source.split('extern "C" void kernel0')[1]
    narrow = "ember_float_to_bf16" if dtype == torch.bfloat16 else "ember_float_to_half"
    # one rounding after the add (not exact), one after the mul (the result)
    assert body.count(narrow) == 2, body


def test_the_builder_forgets_nothing_that_is_not_exact() -> None:
    b = BodyBuilder()
    x = b.cast(b.load("a", 0, torch.bfloat16), torch.float32)  # type: ignore[arg-type]
    neg = b.compute("neg", x)
    assert b.cast(b.cast(neg, torch.bfloat16), torch.float32) == neg  # exact: no trip
    mul = b.compute("mul", x, b.literal(3.0, torch.float32))
    back = b.cast(b.cast(mul, torch.bfloat16), torch.float32)
    assert back != mul  # 3x may not be a bfloat16: rounded as eager rounds it
    flip = b.compute("mul", x, b.literal(-1.0, torch.float32))
    assert b.cast(b.cast(flip, torch.bfloat16), torch.float32) == flip  # a sign flip
    third = b.compute("maximum", x, b.literal(0.1, torch.float32))
    assert b.cast(b.cast(third, torch.bfloat16), torch.float32) != third  # 0.1 is not
