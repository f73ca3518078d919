"""The C++ backend's speed devices for reductions over rows: costly values computed once
per row (ROW_CACHE) and float32 sums accumulated in float blocks (SUM_BLOCK); the
generated source uses them and the results still match eager."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.runtime.ir.graph import Program
from helpers import compile_fn


def _source(compiled: Program) -> str:
    return next(v for k, v in compiled.files.items() if k.endswith(".cpp")).decode()


def _softmax_layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(torch.softmax(x * 2.0, -1), (x.shape[-1],), w, b)


def test_softmax_exp_is_computed_once_per_row() -> None:
    gen = torch.Generator().manual_seed(11)
    x, w, b = torch.randn(8, 1000, generator=gen), torch.randn(1000, generator=gen), \
        torch.randn(1000, generator=gen)
    compiled, run = compile_fn(_softmax_layer_norm, x, w, b)
    source = _source(compiled)
    assert "cache_v" in source and source.count("ember_exp(v") == 1
    assert "std::exp(" not in source.split('extern "C" void', 1)[1]
    torch.testing.assert_close(run(x, w, b)[0], _softmax_layer_norm(x, w, b),
                               rtol=1e-4, atol=1e-4)


def test_masked_softmax_rows_match_eager() -> None:
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(4, 700, generator=gen) * 30
    x[:, ::3] = float("-inf")
    compiled, run = compile_fn(lambda t: torch.softmax(t, -1), x)
    assert "ember_exp(v" in _source(compiled)  # in range for the vector exp, even at -inf
    torch.testing.assert_close(run(x)[0], torch.softmax(x, -1), rtol=1e-5, atol=1e-6)


def test_long_float32_sum_is_blocked_and_accurate() -> None:
    gen = torch.Generator().manual_seed(13)
    x = torch.rand(3, 100_000, generator=gen) + 1000.0  # large same-sign terms
    compiled, run = compile_fn(lambda t: t.sum(-1), x)
    source = _source(compiled)
    assert "float bacc_" in source and "r0b += 256" in source
    exact = x.double().sum(-1)
    assert (run(x)[0].double() - exact).abs().max().item() <= exact.abs().max().item() * 2e-7


def test_softmax_division_fuses_across_a_view() -> None:
    gen = torch.Generator().manual_seed(14)
    scores = torch.randn(2, 4, 32, 48, generator=gen)

    def fn(s: torch.Tensor) -> torch.Tensor:
        return torch.softmax(s, -1).view(8, 32, 48) * 3.0

    compiled, run = compile_fn(fn, scores)
    assert _source(compiled).count('extern "C" void kernel') == 1
    torch.testing.assert_close(run(scores)[0], fn(scores), rtol=1e-5, atol=1e-6)
