"""CPU kernels of torchvision CNNs (one thread): what is stored before a pooling window,
which loads need a mask, the branch-free NaN-propagating max/min, float-blocked sums in
tiled reductions, a batch norm's per-channel square root stored once. Values are checked
against eager, argmax ties and NaNs included."""

from __future__ import annotations

import itertools

import pytest
import torch
from ember.inductor.lowering.pooling import MAX_REREAD_OPS, Window
from ember.runtime.ir.graph import Program
from helpers import compile_fn


def _source(compiled: Program) -> str:
    return "\n".join(v.decode() for k, v in compiled.files.items() if k.endswith(".cpp"))


def _kernels(compiled: Program) -> int:
    return int(compiled.metadata["kernels"])


# (kernel, stride, padding, dilation, ceil_mode) over planes of these sizes
POOLS = [(3, 2, 1, 1, False), (3, 2, 0, 1, True), (3, 2, 1, 1, True), (2, 2, 0, 1, False),
         (3, 1, 1, 1, False), (3, 2, 1, 2, False), (5, 3, 2, 1, True)]
PLANES = [(7, 9), (8, 8), (11, 6)]


def _ties_and_nans(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Small integers (many ties in a window), a few NaNs and -infs."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=g).float()
    x[torch.rand(shape, generator=g) < 0.04] = float("nan")
    x[torch.rand(shape, generator=g) < 0.04] = float("-inf")
    return x


@pytest.mark.parametrize("pool", POOLS, ids=lambda p: "k{}s{}p{}d{}{}".format(
    *p[:4], "ceil" if p[4] else ""))
def test_max_pool_values_and_argmax_match_eager(pool: tuple[int, int, int, int, bool]
                                                 ) -> None:
    k, s, p, d, ceil = pool
    for i, plane in enumerate(PLANES):
        x = _ties_and_nans((2, 3, *plane), seed=i)

        def values(t: torch.Tensor) -> torch.Tensor:
            return torch.ops.aten.max_pool2d_with_indices(t, [k, k], [s, s], [p, p],
                                                          [d, d], ceil)[0]

        def both(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            v, ix = torch.ops.aten.max_pool2d_with_indices(torch.relu(t), [k, k], [s, s],
                                                           [p, p], [d, d], ceil)
            return v, ix

        _, run = compile_fn(values, x)
        torch.testing.assert_close(run(x)[0], values(x), equal_nan=True, rtol=0, atol=0)
        _, run = compile_fn(both, x)
        got, want = run(x), both(x)
        torch.testing.assert_close(got[0], want[0], equal_nan=True, rtol=0, atol=0)
        assert torch.equal(got[1], want[1]), (plane, got[1] - want[1])


def test_window_checks_and_neighbours() -> None:
    # 3x3, stride 2, padding 1 over 48x48 -> 24x24: only the first row/column can be
    # below 0, nothing passes the far edge
    w = Window((3, 3), (2, 2), (1, 1), (1, 1))
    assert w.checks((0, 0), (24, 24), (48, 48)) == (True, False, True, False)
    assert w.checks((1, 2), (24, 24), (48, 48)) == (False, False, False, False)
    # ceil mode, 22 -> 11 without padding: the last window's third column is outside
    c = Window((3, 3), (2, 2), (0, 0), (1, 1))
    assert c.checks((0, 2), (11, 11), (22, 22)) == (False, False, False, True)
    # both fixed by reading the neighbour in the window: no check left
    for window, at, out, plane in ((w, (0, 0), (24, 24), (48, 48)),
                                   (c, (0, 2), (11, 11), (22, 22))):
        from ember.inductor.loop_ir import Var
        pos = (Var("x2", out[0]), Var("x3", out[1]))
        needed = window.checks(at, out, plane)
        *_, left = window.neighbour(at, pos, needed, out, plane)
        assert left == (False,) * 4
    # symbolic sizes keep their checks
    assert c.checks((0, 2), ("s0", 11), (22, 22))[:2] == (False, True)


def _bn_relu_pool(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    y = torch.relu((x - mean[:, None, None]) / torch.sqrt(var[:, None, None] + 1e-5))
    return torch.ops.aten.max_pool2d_with_indices(y, [3, 3], [2, 2], [1, 1])[0]


def test_a_costly_producer_is_stored_before_overlapping_windows() -> None:
    x, mean, var = torch.randn(2, 4, 12, 12), torch.randn(4), torch.rand(4) + 0.5
    compiled, run = compile_fn(_bn_relu_pool, x, mean, var)
    torch.testing.assert_close(run(x, mean, var)[0], _bn_relu_pool(x, mean, var))
    assert _kernels(compiled) == 2  # batch norm + relu stored, then the pool
    # a cheap producer (a relu) stays inlined: one kernel
    compiled, _ = compile_fn(
        lambda t: torch.ops.aten.max_pool2d_with_indices(torch.relu(t), [3, 3], [2, 2])[0], x)
    assert _kernels(compiled) == 1
    assert MAX_REREAD_OPS >= 1


def test_max_and_min_are_branch_free_and_propagate_nan() -> None:
    vals = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan")]
    a, b = map(torch.tensor, zip(*itertools.product(vals, vals)))
    compiled, run = compile_fn(lambda p, q: (torch.maximum(p, q), torch.minimum(p, q)), a, b)
    got = run(a, b)
    torch.testing.assert_close(got[0], torch.maximum(a, b), equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(got[1], torch.minimum(a, b), equal_nan=True, rtol=0, atol=0)
    prelude = _source(compiled)
    body = prelude[prelude.index("T ember_max(T a, T b)"):][:120]
    assert "if (" not in body  # a branch left loops using it scalar (GCC 12)


def _se_mean(x: torch.Tensor) -> torch.Tensor:
    # channels-last: a mean over the spatial dims is strided (the tiled form)
    return (x * torch.sigmoid(x)).mean(dim=(2, 3))


def test_tiled_float_sums_accumulate_in_float_blocks() -> None:
    x = torch.randn(2, 40, 30, 30).to(memory_format=torch.channels_last) + 3.0
    compiled, run = compile_fn(_se_mean, x)
    want = _se_mean(x.double()).float()
    torch.testing.assert_close(run(x)[0], want, rtol=1e-6, atol=1e-6)
    source = _source(compiled)
    assert "xt += 16" in source and "bacc_" in source  # tiled, blocked in float


def _bn_inference(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    inv = torch.reciprocal(torch.sqrt(var + 1e-5))
    return torch.clamp((x - mean[:, None, None]) * inv[:, None, None], 0.0, 6.0)


def test_a_per_channel_square_root_is_computed_once_per_channel() -> None:
    # inflation 16x or more: 1/sqrt(var + eps) stored per channel (DIVISION_STORE_FACTOR)
    x, mean, var = torch.randn(2, 8, 6, 6), torch.randn(8), torch.rand(8) + 0.5
    compiled, run = compile_fn(_bn_inference, x, mean, var)
    torch.testing.assert_close(run(x, mean, var)[0], _bn_inference(x, mean, var))
    assert _kernels(compiled) == 2
    source = _source(compiled)
    per_channel, per_element = source.split('extern "C" void kernel')[1:3]
    assert "x0 < 8" in per_channel and "std::sqrt" in per_channel
    assert "std::sqrt" not in per_element and " / " not in per_element
