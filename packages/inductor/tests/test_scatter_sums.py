"""A 16-bit scatter_add (and scatter_reduce "sum") sums in float32 and rounds once, as
eager's CPU kernel does (``indexed_writes.WIDENED_SCATTER_SUMS``): 3000 ones added into
one bfloat16 element are 3008. Rounding after each add stopped at 256 (256 + 1 rounds
back to 256). index_add and index_put(accumulate=True) round after each add in eager
too, and still do here."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from helpers import compile_for

T = torch.Tensor

SUMS: dict[str, Callable[[T, T, T], T]] = {
    "scatter_add": lambda x, i, v: x.scatter_add(0, i, v),
    "scatter_reduce_sum": lambda x, i, v: x.scatter_reduce(0, i, v, "sum"),
    "index_add": lambda x, i, v: x.index_add(0, i, v),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("op", list(SUMS))
def test_sixteen_bit_sums_match_eager(backend: str, op: str, dtype: torch.dtype) -> None:
    if backend == "triton" and dtype == torch.bfloat16 and op == "index_add":
        pytest.skip("Triton's interpreter has no bfloat16 atomic add (GPUs do)")
    fn = SUMS[op]
    n = 3000 if dtype == torch.bfloat16 else 5000
    x = torch.zeros(2, dtype=dtype)
    i = torch.zeros(n, dtype=torch.long)
    v = torch.ones(n, dtype=dtype)
    _, run = compile_for(fn, x, i, v, backend=backend)
    (got,) = run(x, i, v)
    want = fn(x, i, v)
    assert got.dtype == dtype
    # NOTE: Triton's interpreter rounds float32 to bfloat16 toward zero (3000 -> 2992, a
    # GPU rounds to nearest: 3008): one bfloat16 step apart, where one rounding per add
    # is 2752 below
    ulp = 16.0 if backend == "triton" and dtype == torch.bfloat16 else 0.0
    torch.testing.assert_close(got, want, rtol=0, atol=ulp)
