"""Issue #11 item 1: ops that eager runs compile with the default backend
(``ember.frontend.compile``: strict capture → aot → inductor) and match eager; those that
nothing decomposes to Core ATen run as counted, logged extern fallbacks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ember.frontend
import pytest
import torch
import torch.nn.functional as F
from ember.runtime.config import patch

X = torch.randn(4, 6)
Y = torch.randn(4, 6)
IMAGE = torch.randn(1, 2, 5, 5)
WEIGHT = torch.randn(3, 6, 6)

# name -> (function, inputs, the ops inductor runs as fallbacks)
CASES: dict[str, tuple[Callable[..., Any], tuple[torch.Tensor, ...], set[str]]] = {
    "Tensor.norm": (lambda a: a.norm(), (X,), set()),
    "linalg.vector_norm": (lambda a: torch.linalg.vector_norm(a, 3), (X,), set()),
    "F.normalize": (lambda a: F.normalize(a, dim=1), (X,), set()),
    "F.cosine_similarity": (lambda a, b: F.cosine_similarity(a, b), (X, Y), set()),
    "dist": (lambda a, b: torch.dist(a, b), (X, Y), set()),
    "erfinv": (lambda a: torch.erfinv(a.tanh()), (X,), set()),
    "fmax": (lambda a, b: torch.fmax(a, b.log()), (X, Y), set()),
    "fmin": (lambda a, b: torch.fmin(a.log(), b), (X, Y), set()),
    "copysign": (lambda a, b: torch.copysign(a, b), (X, Y), set()),
    "ldexp": (lambda a, b: torch.ldexp(a, b.round()), (X, Y), set()),
    "cumprod": (lambda a: torch.cumprod(a, 1), (X,), {"aten::cumprod.default"}),
    "cummax": (lambda a: torch.cummax(a, 1), (X,), {"aten::cummax.default"}),
    "median": (lambda a: torch.median(a), (X,), {"aten::median.default"}),
    "kthvalue": (lambda a: torch.kthvalue(a, 2, 1), (X,), {"aten::kthvalue.default"}),
    "isin": (lambda a, b: torch.isin(a.round(), b.round()), (X, Y),
             {"aten::searchsorted.Tensor", "aten::sort.default"}),
    "addmv": (lambda a, b: torch.addmv(a[:, 0], a, b[0]), (X, Y), set()),
    "addbmm": (lambda a, b: torch.addbmm(a[:2, :2], a.reshape(2, 2, 6), b.reshape(2, 6, 2)),
               (X, Y), set()),
    "interpolate_bilinear": (lambda i: F.interpolate(i, scale_factor=2, mode="bilinear"),
                             (IMAGE,), set()),
    "interpolate_bicubic": (lambda i: F.interpolate(i, scale_factor=2, mode="bicubic"),
                            (IMAGE,), set()),
    "adaptive_max_pool2d": (lambda i: F.adaptive_max_pool2d(i, 2), (IMAGE,),
                            {"aten::adaptive_max_pool2d.default"}),
    "F.bilinear": (lambda a, b: F.bilinear(a, b, WEIGHT), (X, Y), {"aten::_trilinear.default"}),
}


def _leaves(value: Any) -> list[torch.Tensor]:
    return list(value) if isinstance(value, tuple) else [value]


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiles_and_matches_eager(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    fn, inputs, fallbacks = CASES[name]
    compiled = ember.frontend.compile(fn)
    with patch(logs="fallbacks"):
        got = compiled(*inputs)
    for g, e in zip(_leaves(got), _leaves(fn(*inputs)), strict=True):
        torch.testing.assert_close(g, e)
    assert compiled.stats.fallbacks == len(fallbacks)
    logged = capsys.readouterr().err
    for op in fallbacks:
        assert f"{op} runs eagerly" in logged


@pytest.mark.parametrize("name", ["median", "kthvalue", "F.normalize", "dist", "F.bilinear"])
def test_training_matches_eager(name: str) -> None:
    fn, inputs, fallbacks = CASES[name]
    compiled = ember.frontend.compile(fn)
    leaves = [t.clone().requires_grad_(True) for t in inputs]
    eager_leaves = [t.clone().requires_grad_(True) for t in inputs]
    got = _leaves(compiled(*leaves))[0]
    expected = _leaves(fn(*eager_leaves))[0]
    torch.testing.assert_close(got, expected)
    cotangent = torch.randn(expected.shape)
    for g, e in zip(torch.autograd.grad(got, leaves, cotangent),
                    torch.autograd.grad(expected, eager_leaves, cotangent), strict=True):
        torch.testing.assert_close(g, e)
    assert compiled.stats.fallbacks is not None
    assert compiled.stats.fallbacks >= len(fallbacks)
