"""bfloat16/float16 pointwise chains compute in float32. By default (torch.compile's
semantics) a fused chain rounds once, where its result is stored: bitwise the float32
computation rounded at the end. With ``emulate_precision_casts`` each op's result is
rounded as eager rounds it, except for ops whose result the narrow dtype holds exactly
(neg, abs, sign, max/min, where: ``builder.EXACT_IN_NARROW``): bitwise eager's, NaN,
infinities and -0 included. An explicit cast rounds in both."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.lowering.builder import BodyBuilder
from helpers import compile_and_load, compile_fn, trace


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


def _chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    z = torch.relu(-(x.abs())) + torch.maximum(x, y).neg().sign()
    return torch.where(x > 0, z, y.abs()) * 3


def _roundings(compiled: object, dtype: torch.dtype) -> int:
    (source,) = [v.decode() for k, v in compiled.files.items()  # type: ignore[attr-defined]
                 if k.endswith(".cpp")]
    body = source.split('extern "C" void kernel0')[1]
    return body.count("ember_float_to_bf16" if dtype == torch.bfloat16 else "ember_float_to_half")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_a_fused_chain_rounds_once_where_it_is_stored(dtype: torch.dtype) -> None:
    x, y = _special(dtype), _special(dtype).flip(0)
    compiled, run = compile_fn(_chain, x, y)
    _bitwise(run(x, y)[0], _chain(x.float(), y.float()).to(dtype))
    assert _roundings(compiled, dtype) == 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_exact_ops_skip_the_round_trip_and_match_eager_bitwise(dtype: torch.dtype) -> None:
    x, y = _special(dtype), _special(dtype).flip(0)
    compiled, run = compile_and_load(trace(_chain, (x, y)), emulate_precision_casts=True)
    _bitwise(run(x, y)[0], _chain(x, y))
    # one rounding after the add (not exact), one after the mul (the result)
    assert _roundings(compiled, dtype) == 2


def test_an_explicit_cast_rounds() -> None:
    """``x * 3`` (a bfloat16 op) and ``(x.float() * 3).to(bfloat16)`` share one float32
    product; the op's result is read unrounded, the explicit cast's rounded."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 3).float() + (x.float() * 3).to(torch.bfloat16).float()

    x = _special(torch.bfloat16)[6:]
    _, run = compile_fn(f, x)
    want = x.float() * 3 + (x.float() * 3).to(torch.bfloat16).float()
    torch.testing.assert_close(run(x)[0], want, rtol=0, atol=0)
    assert not torch.equal(want, f(x))  # eager rounds x * 3 too


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
