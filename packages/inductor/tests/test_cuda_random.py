"""Random ops in real Triton kernels on a CUDA GPU (``lowering/random.py``): no
fallbacks, the seed contract, the values of the numpy reference Philox (uniform bit for
bit, as on CPU) and of Triton's own ``tl.rand`` / ``tl.randn``, distributions, and
dropout's mask and scale. Skipped without CUDA; run on the H200 test machine."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from helpers import compile_and_load, trace
from test_random import graph_seed, reference_rand, reference_randn

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]

aten = torch.ops.aten
SHAPE = (256, 256)


def _ops(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    r = aten.rand_like(x)
    return (r, aten.randn_like(x), (r * x).sum(-1), aten.bernoulli.p(x, 0.3),
            *aten.native_dropout.default(x, 0.25, True),
            aten.rand_like(x.to(torch.bfloat16)),
            aten.randint.low(-3, 7, [4096], device=x.device))


def _compiled() -> tuple[Any, Any, torch.Tensor]:
    x = torch.rand(SHAPE, device="cuda") + 0.5  # no zeros
    compiled, run = compile_and_load(trace(_ops, [x]))
    return compiled, run, x


def test_no_fallbacks_and_the_reference_values() -> None:
    compiled, run, x = _compiled()
    assert compiled.metadata["fallbacks"] == {}
    key = graph_seed(21, "cuda")
    torch.manual_seed(21)
    outs = run(x)
    n = x.numel()
    assert np.array_equal(outs[0].flatten().cpu().numpy(), reference_rand(key, n))
    np.testing.assert_allclose(outs[1].flatten().cpu().numpy(), reference_randn(key + 1, n),
                               rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(outs[2], (outs[0] * x).sum(-1), rtol=1e-5, atol=1e-3)


def test_reproducible_and_different_across_calls() -> None:
    _, run, x = _compiled()
    torch.manual_seed(4)
    first, second = run(x), run(x)
    torch.manual_seed(4)
    again = run(x)
    assert all(torch.equal(a, c) for a, c in zip(first, again))
    assert all(not torch.equal(a, b) for a, b in zip(first, second))


def test_distributions_and_dropout() -> None:
    _, run, x = _compiled()
    torch.manual_seed(0)
    u, z, _, b, out, mask, u16, r = run(x)
    u = u.double()
    assert 0 <= u.min() and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    assert abs(z.double().mean()) < 0.02 and abs(z.double().std() - 1) < 0.02
    assert abs(b.mean().item() - 0.3) < 0.01
    assert abs((~mask).double().mean().item() - 0.25) < 0.01
    torch.testing.assert_close(out, torch.where(mask, x / 0.75, 0.0), rtol=1e-6, atol=0)
    assert u16.dtype == torch.bfloat16 and 0 <= u16.min() and u16.max() < 1
    assert -3 <= r.min() and r.max() < 7
    counts = torch.bincount(r + 3, minlength=10).double() / r.numel()
    assert (counts - 0.1).abs().max() < 0.02


def test_same_values_as_triton_tl_rand() -> None:
    """The generated kernels' Philox is Triton's: ``tl.rand``/``tl.randn`` with the same
    key and offsets give the same values."""
    import triton
    import triton.language as tl

    @triton.jit
    def draw(out_ptr, key, n, NORMAL: tl.constexpr, BLOCK: tl.constexpr):
        offsets = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
        if NORMAL:
            values = tl.randn(key, offsets)
        else:
            values = tl.rand(key, offsets)
        tl.store(out_ptr + offsets, values, mask=offsets < n)

    _, run, x = _compiled()
    key = graph_seed(9, "cuda")
    torch.manual_seed(9)
    outs = run(x)
    n = x.numel()
    for normal, got in ((False, outs[0]), (True, outs[1])):
        ref = torch.empty(n, device="cuda")
        draw[(triton.cdiv(n, 1024),)](ref, key + int(normal), n, normal, 1024)
        assert torch.equal(got.flatten(), ref)
