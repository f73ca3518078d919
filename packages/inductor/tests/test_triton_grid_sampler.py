"""``grid_sampler_2d`` and its backward as Triton kernels, run by Triton's interpreter on
CPU tensors (``triton_for_cpu``): every interpolation x padding x align_corners
combination and the non-finite grids against eager, as test_grid_sampler.py does for the
C++ kernels."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from grid_sampler_cases import (
    COMBOS,
    EAGER_CRASHES,
    INF,
    NAN,
    batched,
    inputs,
    problems,
    sample,
    special_grid,
)
from helpers import compile_and_load, trace

pytest.importorskip("triton")
# the interpreter computes with numpy, which warns on NaN and infinite operands
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_every_combination_matches_eager() -> None:
    x, grid, grad = inputs(batch=1, channels=2)
    _check_interpreted(COMBOS, x, grid, grad)


def test_non_finite_grid_values_match_eager() -> None:
    combos = [c for c in COMBOS if c[:2] not in EAGER_CRASHES]
    x, _, _ = inputs(seed=2, batch=1, channels=2)
    grid = special_grid((NAN, INF, -INF, 1e30, -3e7), batch=1)
    grad = torch.randn(1, 2, *grid.shape[1:3], generator=torch.Generator().manual_seed(2))
    _check_interpreted(combos, x, grid, grad)


def _check_interpreted(combos: Any, x: torch.Tensor, grid: torch.Tensor,
                       grad: torch.Tensor) -> None:
    """``combos`` compiled to Triton kernels (interpreted), no fallback, matching eager."""
    from ember.inductor.codegen.triton.testing import triton_for_cpu

    fn = batched(combos)
    with triton_for_cpu():
        compiled, run = compile_and_load(trace(fn, [x, grid, grad]), precompile=False)
    assert compiled.metadata["fallbacks"] == {}
    assert problems(run(x, grid, grad), fn(x, grid, grad), combos) == []


def test_kernels_are_triton() -> None:
    """The forward is one Triton kernel that loads the input through computed offsets."""
    from ember.inductor.codegen.triton.testing import triton_for_cpu

    x, grid, grad = inputs(seed=3, batch=1, channels=2)
    fn = sample(("bilinear", "border", False))
    with triton_for_cpu():
        compiled, _ = compile_and_load(trace(lambda a, g: fn(a, g, grad)[0], [x, grid]),
                                       precompile=False)
    assert compiled.metadata["fallbacks"] == {} and compiled.metadata["kernels"] == 1
    source = "\n".join(v.decode() for k, v in compiled.files.items() if k.endswith(".py"))
    assert "@triton.jit" in source and "tl.load" in source
