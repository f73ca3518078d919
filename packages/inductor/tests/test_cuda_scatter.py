"""Scatters on a CUDA GPU: accumulating writes become Triton atomic adds, correct when
many programs hit the same rows (the embedding gradient's shape). Skipped without CUDA;
run on the H200 test machine (tools/gpu/h200_all.sh)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from helpers import compile_and_load, trace

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]


def _sources(compiled) -> str:  # type: ignore[no-untyped-def]
    return "\n".join(f.decode() for name, f in compiled.files.items() if name.endswith(".py"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64])
def test_repeated_rows_accumulate_atomically(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 100, (8192,), generator=gen).cuda()
    if dtype.is_floating_point:
        g = torch.randn(8192, 64, generator=gen).to(dtype).cuda()
    else:
        g = torch.randint(-5, 5, (8192, 64), generator=gen).cuda()
    base = torch.zeros(100, 64, dtype=dtype, device="cuda")

    def fn(base: torch.Tensor, g: torch.Tensor, rows: torch.Tensor) -> list[torch.Tensor]:
        return [torch.index_put(base, (rows,), g, accumulate=True),
                torch.index_add(base, 0, rows, g, alpha=2),
                torch.scatter_add(base, 0, rows[:, None].expand(8192, 64), g)]

    compiled, run = compile_and_load(trace(fn, [base, g, rows]))
    assert compiled.metadata["fallbacks"] == {}
    assert "tl.atomic_add" in _sources(compiled)
    expected = [t.float() for t in fn(base.double() if dtype.is_floating_point else base,
                                      g.double() if dtype.is_floating_point else g, rows)]
    # each output row sums ~80 values: low-precision rounding grows with the count
    tol = {torch.float32: 1e-3, torch.float16: 0.5, torch.bfloat16: 4.0}.get(dtype, 0)
    for a, e in zip(run(base, g, rows), expected):
        torch.testing.assert_close(a.float(), e, rtol=0.02 if tol else 0, atol=tol)


def test_plain_scatter_and_index_put_on_gpu() -> None:
    x = torch.randn(64, 128, device="cuda")
    perm = torch.stack([torch.randperm(128)[:32] for _ in range(64)]).cuda()
    src = torch.randn(64, 32, device="cuda")
    rows = torch.randperm(64)[:20].cuda() - 32
    vals = torch.randn(20, 128, device="cuda")

    def fn(x: torch.Tensor, perm: torch.Tensor, src: torch.Tensor, rows: torch.Tensor,
           vals: torch.Tensor) -> list[torch.Tensor]:
        return [torch.scatter(x.relu(), 1, perm, src) * 2,
                torch.index_put(x, (rows,), vals).sum(1)]

    compiled, run = compile_and_load(trace(fn, [x, perm, src, rows, vals]))
    assert compiled.metadata["fallbacks"] == {}
    for a, e in zip(run(x, perm, src, rows, vals), fn(x, perm, src, rows, vals)):
        torch.testing.assert_close(a, e)
