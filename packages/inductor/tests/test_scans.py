"""``cumsum`` (``cumprod``) as a masked sum (product) along a short dim (``lowering/scans.py``) on backends with
a ``max_scan_length`` (Triton; run here by Triton's interpreter), eager's scan (a
counted fallback) elsewhere and past the length."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.codegen.triton.backend import TritonBackend
from ember.inductor.codegen.triton.testing import triton_for_cpu
from helpers import compile_and_load, trace

pytest.importorskip("triton")


def _triton(fn: object, *inputs: torch.Tensor) -> tuple[object, torch.Tensor]:
    with triton_for_cpu():
        compiled, run = compile_and_load(trace(fn, list(inputs)), precompile=False)  # type: ignore[arg-type]
    return compiled, run(*inputs)[0]


def test_position_ids_from_a_mask_are_one_kernel_and_exact() -> None:
    def position_ids(mask: torch.Tensor) -> torch.Tensor:  # HF GPT-2 / Llama
        return (mask.ne(0).cumsum(-1) * mask - 1).clamp(min=0)

    torch.manual_seed(0)
    mask = (torch.rand(4, 37) > 0.3).long()
    compiled, got = _triton(position_ids, mask)
    assert compiled.metadata["fallbacks"] == {}  # type: ignore[attr-defined]
    kernels = compiled.metadata["compiled"]["graphs"]["forward"]["kernels"]  # type: ignore[attr-defined]
    assert len(kernels) == 1
    assert torch.equal(got, position_ids(mask))


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_float_cumsum_along_any_dim_is_the_rounded_running_sum(dim: int,
                                                                dtype: torch.dtype) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x * 2, dim)

    torch.manual_seed(1)
    x = torch.randn(6, 40, 5).to(dtype)
    compiled, got = _triton(fn, x)
    assert compiled.metadata["fallbacks"] == {}  # type: ignore[attr-defined]
    assert got.dtype == dtype and got.shape == x.shape
    # float32 accumulation, one rounding to the result's dtype (Triton's interpreter
    # casts to bfloat16 by truncation: an ulp, 2**-7 relative; a GPU rounds to nearest)
    exact = torch.cumsum(x.double() * 2, dim)
    rtol = 1e-6 if dtype == torch.float32 else 2.0**-7
    torch.testing.assert_close(got.double(), exact, rtol=rtol, atol=1e-5)


def test_dtype_argument_0d_integer_inputs_and_cumprod() -> None:
    def fn(i: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.cumsum(i, 0, dtype=torch.float32), torch.cumsum(s, 0), i.cumsum(1),
                i.cumprod(1), torch.cumprod(i.float() / 4, 0), s.cumprod(0))

    i, s = torch.randint(-5, 5, (7, 9), dtype=torch.int32), torch.tensor(3.5)
    with triton_for_cpu():
        compiled, run = compile_and_load(trace(fn, [i, s]), precompile=False)
    assert compiled.metadata["fallbacks"] == {}
    for got, want in zip(run(i, s), fn(i, s)):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want)


def test_a_long_dim_and_the_cpu_keep_eagers_scan() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, -1) + 1

    limit = TritonBackend.max_scan_length
    assert limit == 1024 and CppBackend.max_scan_length is None
    x = torch.randn(2, limit + 1)
    compiled, got = _triton(fn, x)
    assert compiled.metadata["fallbacks"] == {"aten::cumsum.default": 1}  # type: ignore[attr-defined]
    torch.testing.assert_close(got, fn(x))
    compiled, run = compile_and_load(trace(fn, [x[:, :8]]))  # the C++ backend
    assert compiled.metadata["fallbacks"] == {"aten::cumsum.default": 1}
    torch.testing.assert_close(run(x[:, :8])[0], fn(x[:, :8]))
