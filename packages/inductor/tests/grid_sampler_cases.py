"""Cases of ``grid_sampler_2d`` and its backward shared by the C++ (test_grid_sampler.py),
Triton-interpreter (test_triton_grid_sampler.py) and CUDA (test_cuda_grid_sampler.py)
tests: every interpolation x padding x align_corners combination in one traced graph
(one compile), grids with points outside [-1, 1], exact pixel centres, halfway points
(nearest rounds them half to even) and non-finite values."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

aten = torch.ops.aten
MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}
Combo = tuple[str, str, bool]
COMBOS: list[Combo] = [(m, p, a) for m in MODES for p in PADDINGS for a in (True, False)]
NAN, INF = float("nan"), float("inf")

# Eager's CPU kernel reads outside its input (it crashes) for these grid values; the
# lowering reads pixel 0 there (as eager's nearest and bicubic kernels do).
EAGER_CRASHES: dict[tuple[str, str], tuple[float, ...]] = {
    ("bilinear", "border"): (NAN,), ("bilinear", "reflection"): (NAN, INF, -INF)}


def combo_id(combo: Combo) -> str:
    mode, padding, align = combo
    return f"{mode}-{padding}-{'align' if align else 'noalign'}"


def inputs(dtype: torch.dtype = torch.float32, seed: int = 0, batch: int = 2,
           channels: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x, grid, grad_output)``: a 5 x 9 plane sampled at 4 x 6 points a batch. Half
    of the grid values are multiples of 1/16 in [-1.75, 1.75] (exact pixel centres and
    halfway points where the sizes allow: 9 columns with aligned corners give pixel
    x = 4 (g + 1)), the others uniform in [-1.6, 1.6]."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, channels, 5, 9, generator=gen)
    dyadic = torch.randint(-28, 29, (batch, 4, 6, 2), generator=gen) / 16
    uniform = torch.rand(batch, 4, 6, 2, generator=gen) * 3.2 - 1.6
    pick = torch.rand(batch, 4, 6, 1, generator=gen) < 0.5
    grid = torch.where(pick, dyadic, uniform)
    grad = torch.randn(batch, channels, 4, 6, generator=gen)
    return x.to(dtype), grid.to(dtype), grad.to(dtype)


def special_grid(values: Sequence[float], batch: int = 2) -> torch.Tensor:
    """A grid of 4 x 2k points: each of ``values`` as x with an ordinary y, and as y
    with an ordinary x (k = len(values))."""
    ordinary = (0.3, -0.55, 0.8, -0.9)
    pairs = [(v, o) for v in values for o in ordinary[:2]]
    pairs += [(o, v) for v in values for o in ordinary[2:]]
    grid = torch.tensor(pairs, dtype=torch.float32).reshape(1, 4, -1, 2)
    return grid.expand(batch, -1, -1, -1).contiguous()


def sample(combo: Combo) -> Callable[..., list[torch.Tensor]]:
    """``fn(x, grid, grad) -> [output, input gradient, grid gradient]`` of ``combo``."""
    mode, padding, align = MODES[combo[0]], PADDINGS[combo[1]], combo[2]

    def fn(x: torch.Tensor, grid: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
        out = aten.grid_sampler_2d(x, grid, mode, padding, align)
        gx, gg = aten.grid_sampler_2d_backward(grad, x, grid, mode, padding, align,
                                               [True, True])
        return [out, gx, gg]

    return fn


def batched(combos: Sequence[Combo]) -> Callable[..., list[torch.Tensor]]:
    """Every combo's :func:`sample` on the same inputs, one result list."""
    fns = [sample(c) for c in combos]

    def fn(x: torch.Tensor, grid: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
        return [t for f in fns for t in f(x, grid, grad)]

    return fn


def problems(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor],
             combos: Sequence[Combo], rtol: float = 1e-5, atol: float = 1e-5) -> list[str]:
    """Each result of ``got`` that differs from ``want`` (NaN where eager has NaN), named
    by its combo. Bicubic's get 10 times the tolerances: its sums of 16 terms run in
    another order than eager's (differences of 1e-6 of the largest value in float32,
    both as close to float64's)."""
    found = []
    for k, (a, e) in enumerate(zip(got, want, strict=True)):
        combo = combos[k // 3]
        name = f"{combo_id(combo)} {('output', 'grad_input', 'grad_grid')[k % 3]}"
        scale = 10 if combo[0] == "bicubic" else 1
        try:
            torch.testing.assert_close(a.cpu(), e.cpu(), rtol=rtol * scale, atol=atol * scale,
                                       equal_nan=True)
        except AssertionError as err:
            found.append(f"{name}: {' '.join(str(err).splitlines()[2:4])}")
    return found
