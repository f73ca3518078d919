"""``grid_sampler_2d`` and its backward (``F.grid_sample`` on 4-d inputs) are lowered on
the CPU (C++), not fallbacks (``lowering/grid_sampler.py``): every interpolation x
padding x align_corners combination against eager, forward and both gradients; grids
outside [-1, 1], halfway points (nearest: half to even), NaN and infinities; training
through ``ember.frontend.compile``; fusion; ``output_mask``; the cuDNN variants; dtypes;
symbolic sizes. The Triton interpreter runs the same cases in
test_triton_grid_sampler.py, a GPU in test_cuda_grid_sampler.py."""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path
from typing import cast

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from grid_sampler_cases import (
    COMBOS,
    EAGER_CRASHES,
    INF,
    MODES,
    NAN,
    PADDINGS,
    Combo,
    aten,
    batched,
    combo_id,
    inputs,
    problems,
    sample,
    special_grid,
)
from helpers import compile_and_load, trace

SPECIAL = (NAN, INF, -INF, 1e30, -1e30, 1e10, 3e7, -4.5e4, 7.25)


def test_every_combination_matches_eager() -> None:
    x, grid, grad = inputs()
    fn = batched(COMBOS)
    compiled, run = compile_and_load(trace(fn, [x, grid, grad]))
    assert compiled.metadata["fallbacks"] == {}
    assert problems(run(x, grid, grad), fn(x, grid, grad), COMBOS) == []


def test_strided_inputs_match_eager() -> None:
    """A channels-last input, a grid that is a permuted view, a broadcast gradient."""
    x, grid, grad = inputs(seed=1)
    x = x.contiguous(memory_format=torch.channels_last)
    grid = grid.permute(0, 3, 1, 2).contiguous().permute(0, 2, 3, 1)
    grad = grad[:, :1].expand_as(grad)
    combos = [("bilinear", "zeros", False), ("nearest", "reflection", True),
              ("bicubic", "border", False)]
    fn = batched(combos)
    compiled, run = compile_and_load(trace(fn, [x, grid, grad]))
    assert compiled.metadata["fallbacks"] == {}
    assert problems(run(x, grid, grad), fn(x, grid, grad), combos) == []


def _safe(combo: Combo) -> list[float]:
    crashes = EAGER_CRASHES.get(combo[:2], ())
    return [v for v in SPECIAL
            if not any(v == c or (math.isnan(v) and math.isnan(c)) for c in crashes)]


def test_non_finite_and_huge_grid_values_match_eager() -> None:
    """NaN, infinities and values far outside [-1, 1] (the reflection folds them as
    eager does, with its rounding), each combination with the values eager survives."""
    x, _, _ = inputs(seed=2)
    grids = [special_grid(_safe(c)) for c in COMBOS]
    gen = torch.Generator().manual_seed(2)
    grads = [torch.randn(2, 3, *g.shape[1:3], generator=gen) for g in grids]
    fns = [sample(c) for c in COMBOS]

    def fn(x: torch.Tensor, *gs: torch.Tensor) -> list[torch.Tensor]:
        n = len(fns)
        return [t for f, g, o in zip(fns, gs[:n], gs[n:]) for t in f(x, g, o)]

    compiled, run = compile_and_load(trace(fn, [x, *grids, *grads]))
    assert compiled.metadata["fallbacks"] == {}
    assert problems(run(x, *grids, *grads), fn(x, *grids, *grads), COMBOS) == []


@pytest.mark.parametrize("combo", [("bilinear", "border", True),
                                   ("bilinear", "reflection", True)], ids=combo_id)
def test_where_eager_crashes_pixel_zero_is_read(combo: Combo) -> None:
    """Eager's kernel reads outside its input for these values; here they read pixel 0
    (with aligned corners, as grid value -1 does), and get no gradient."""
    x, _, _ = inputs(seed=3)
    values = EAGER_CRASHES[combo[:2]]
    grid = special_grid(values)
    grad = torch.randn(2, 3, *grid.shape[1:3], generator=torch.Generator().manual_seed(3))
    fn = sample(combo)
    compiled, run = compile_and_load(trace(fn, [x, grid, grad]))
    assert compiled.metadata["fallbacks"] == {}
    stand_in = torch.where(grid.isfinite(), grid, -1.0)
    assert problems(run(x, grid, grad), fn(x, stand_in, grad), [combo]) == []


def test_nearest_rounds_halfway_points_to_even() -> None:
    # 9 columns, aligned corners: pixel x = 4 (g + 1) = k + 0.5 exactly
    gx = torch.tensor([(k + 0.5) / 4 - 1 for k in range(8)])
    grid = torch.stack([gx, torch.zeros(8)], -1).reshape(1, 1, 8, 2)
    x = torch.arange(9.0).reshape(1, 1, 1, 9).expand(1, 1, 5, 9).contiguous()

    def fn(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = aten.grid_sampler_2d(a, g, MODES["nearest"], PADDINGS["zeros"],
                                                 True)
        return out

    compiled, run = compile_and_load(trace(fn, [x, grid]))
    assert compiled.metadata["fallbacks"] == {}
    got = run(x, grid)[0].flatten().tolist()
    assert got == fn(x, grid).flatten().tolist() == [0.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, 8.0]


class _Warp(torch.nn.Module):
    """A convolution's features sampled at a learned offset from the identity grid."""

    def __init__(self, combo: Combo) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.offset = torch.nn.Parameter(torch.randn(1, 5, 6, 2) * 0.4)
        self.mode, self.padding, self.align = combo

    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        feat = self.conv(x).relu()
        out = F.grid_sample(feat, grid + self.offset, mode=self.mode,
                            padding_mode=self.padding, align_corners=self.align)
        return out.square().sum((2, 3))


@pytest.mark.parametrize("combo", [("bilinear", "zeros", True), ("nearest", "border", False),
                                   ("bicubic", "reflection", False)], ids=combo_id)
def test_training_matches_eager(combo: Combo) -> None:
    import ember.frontend

    torch.manual_seed(0)
    model = _Warp(combo)
    eager = copy.deepcopy(model)
    compiled = ember.frontend.compile(model, backend="inductor", options={"strict": True})
    x = torch.randn(2, 3, 6, 7, requires_grad=True)
    grid = (torch.rand(2, 5, 6, 2) * 2.4 - 1.2).requires_grad_(True)
    x2, grid2 = x.detach().clone().requires_grad_(True), grid.detach().clone().requires_grad_(True)
    got, want = compiled(x, grid), eager(x2, grid2)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    got.sum().backward()
    want.sum().backward()
    assert compiled.stats.fallbacks == 0
    for a, b in [(x.grad, x2.grad), (grid.grad, grid2.grad),
                 *zip([p.grad for p in model.parameters()],
                      [p.grad for p in eager.parameters()])]:
        assert a is not None and b is not None
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_forward_fuses_with_the_grid_and_the_consumer() -> None:
    x, grid, _ = inputs(seed=4)
    flow = torch.randn(grid.shape, generator=torch.Generator().manual_seed(4)) * 0.1

    def fn(a: torch.Tensor, g: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        return (F.grid_sample(a, g + f, align_corners=False).relu() * 2).unsqueeze(0)

    compiled, run = compile_and_load(trace(fn, [x, grid, flow]))
    assert compiled.metadata["fallbacks"] == {}
    assert compiled.metadata["kernels"] == 1
    torch.testing.assert_close(run(x, grid, flow)[0], fn(x, grid, flow))


def test_output_mask_computes_only_what_is_asked() -> None:
    x, grid, grad = inputs(seed=5)

    def grid_only(o: torch.Tensor, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        gx, gg = aten.grid_sampler_2d_backward(o, a, g, 0, 2, False, [False, True])
        assert gx is None  # eager's (and the lowering's): no input gradient
        return cast(torch.Tensor, gg)

    def input_only(o: torch.Tensor, a: torch.Tensor, g: torch.Tensor) -> list[torch.Tensor]:
        # eager returns the grid gradient all the same
        return list(aten.grid_sampler_2d_backward(o, a, g, 0, 2, False, [True, False]))

    compiled, run = compile_and_load(trace(grid_only, [grad, x, grid]))
    assert compiled.metadata["fallbacks"] == {}
    assert compiled.metadata["kernels"] == 1  # the sum over channels, no scatter
    torch.testing.assert_close(run(grad, x, grid)[0], grid_only(grad, x, grid))
    compiled, run = compile_and_load(trace(input_only, [grad, x, grid]))
    assert compiled.metadata["fallbacks"] == {}
    for a, b in zip(run(grad, x, grid), input_only(grad, x, grid)):
        torch.testing.assert_close(a, b)


def test_cudnn_variants_lower_as_bilinear_zero_padded_aligned() -> None:
    """CUDA programs record cudnn_grid_sampler (and its backward) for bilinear, zero
    padded, corner-aligned sampling; it has no CPU kernel, so the nodes are written by
    hand here into a traced CPU program."""
    x, grid, grad = inputs(seed=6)
    fn = sample(("bilinear", "zeros", True))
    program = trace(fn, [x, grid, grad])
    for node in program.forward.nodes:
        if node.target == "aten::grid_sampler_2d.default":
            node.target, node.args = "aten::cudnn_grid_sampler.default", node.args[:2]
        elif node.target == "aten::grid_sampler_2d_backward.default":
            node.target = "aten::cudnn_grid_sampler_backward.default"
            node.args = (node.args[1], node.args[2], node.args[0])
    compiled, run = compile_and_load(program)
    assert compiled.metadata["fallbacks"] == {}
    assert problems(run(x, grid, grad), fn(x, grid, grad), [("bilinear", "zeros", True)]) == []


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_other_float_dtypes(dtype: torch.dtype) -> None:
    """float64 as eager; float16/bfloat16 compute in float32 (coordinates, weights, sums)
    and round once, as the inductor's narrow floats do: compared with eager's float32
    results (eager's own half kernels round every step; nearest then picks other pixels)."""
    combos = [("bilinear", "reflection", False), ("nearest", "zeros", False),
              ("bicubic", "border", True)]
    x, grid, grad = inputs(dtype, seed=7)
    fn = batched(combos)
    compiled, run = compile_and_load(trace(fn, [x, grid, grad]))
    assert compiled.metadata["fallbacks"] == {}
    got = run(x, grid, grad)
    if dtype == torch.float64:
        assert problems(got, fn(x, grid, grad), combos, rtol=1e-12, atol=1e-12) == []
        return
    want = [t.to(dtype) for t in fn(x.float(), grid.float(), grad.float())]
    tol = 1e-2 if dtype == torch.float16 else 4e-2
    assert problems([t.float() for t in got], [t.float() for t in want], combos, tol, tol) == []


def test_symbolic_sizes_train_without_fallbacks() -> None:
    import ember.frontend

    def fn(x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        return F.grid_sample(x, grid, padding_mode="reflection", align_corners=False) * 2

    torch.manual_seed(0)
    compiled = ember.frontend.compile(fn, backend="inductor", dynamic=True)
    for batch, height, width in [(2, 5, 7), (3, 6, 9)]:
        x = torch.randn(batch, 2, height, width, requires_grad=True)
        grid = (torch.rand(batch, 4, 3, 2) * 3 - 1.5).requires_grad_(True)
        got, want = compiled(x, grid), fn(x, grid)
        torch.testing.assert_close(got, want)
        for a, b in zip(torch.autograd.grad(got.sum(), [x, grid]),
                        torch.autograd.grad(want.sum(), [x, grid])):
            torch.testing.assert_close(a, b)
    assert compiled.stats.fallbacks == 0 and compiled.stats.eager_fallback_calls == 0


def test_grid_sampler_3d_stays_a_counted_fallback() -> None:
    """5-d inputs sample with grid_sampler_3d, which has no lowering: one extern call."""
    torch.manual_seed(0)
    x, grid = torch.randn(1, 2, 3, 4, 5), torch.rand(1, 2, 3, 4, 3) * 2 - 1

    def fn(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return F.grid_sample(a, g, align_corners=False) * 2

    compiled, run = compile_and_load(trace(fn, [x, grid]))
    assert compiled.metadata["fallbacks"] == {"aten::grid_sampler_3d.default": 1}
    torch.testing.assert_close(run(x, grid)[0], fn(x, grid))
