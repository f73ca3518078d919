"""The backward ops of nearest upsampling and replication padding leave the aot stage as
scatter-adds (``index_add``), not extern calls, and give eager's gradients: integer and
fractional scales, explicit sizes, ``nearest-exact``, one to three spatial axes, half
precision (accumulated in float32)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from aot_capture import compile_fn
from ember.aot.config import AotConfig


def _check(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
           tol: float | None = None) -> None:
    def program_fn(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (fn(a),)

    leaf = x.clone().requires_grad_(True)
    program, run = compile_fn(program_fn, leaf, config=AotConfig(training=True))
    assert program.metadata["aot"]["extern_ops"] == []
    assert "backward" not in str(program.metadata["aot"].get("extern_ops"))
    got = run([leaf])[0]
    weights = torch.linspace(-1, 1, got.numel()).reshape(got.shape).to(got.dtype)
    (g,) = torch.autograd.grad((got.float() * weights.float()).sum(), leaf)
    ref = x.clone().requires_grad_(True)
    want = fn(ref)
    (w,) = torch.autograd.grad((want.float() * weights.float()).sum(), ref)
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    torch.testing.assert_close(g, w, atol=tol, rtol=tol)  # None: the dtype's default


NEAREST: list[tuple[tuple[int, ...], dict[str, Any]]] = [
    ((1, 2, 5, 7), {"scale_factor": 2}),
    ((1, 2, 5, 7), {"size": (8, 11)}),
    ((1, 2, 9, 7), {"size": (4, 3)}),
    ((1, 2, 5, 7), {"scale_factor": 1.7}),
    ((1, 2, 5, 7), {"scale_factor": (0.6, 2.5)}),
    ((1, 2, 5, 7), {"size": (8, 11), "mode": "nearest-exact"}),
    ((1, 2, 5, 7), {"scale_factor": 1.7, "mode": "nearest-exact"}),
    ((2, 3, 7), {"size": 12}),
    ((2, 3, 7), {"scale_factor": 3, "mode": "nearest-exact"}),
    ((1, 2, 3, 4, 5), {"size": (5, 6, 9)}),
    ((1, 2, 3, 4, 5), {"scale_factor": 2, "mode": "nearest-exact"}),
]


@pytest.mark.parametrize(("shape", "kw"), NEAREST,
                         ids=[f"{len(s) - 2}d-{i}" for i, (s, _) in enumerate(NEAREST)])
def test_nearest_upsampling_backward_is_decomposed(shape: tuple[int, ...],
                                                   kw: dict[str, Any]) -> None:
    kw = {"mode": "nearest", **kw}
    _check(lambda a: F.interpolate(a, **kw) * 3, torch.randn(shape))


PADS: list[tuple[tuple[int, ...], tuple[int, ...]]] = [
    ((2, 3, 6), (2, 3)),
    ((2, 3, 6), (0, 7)),  # more padding than input: the edge element gets it all
    ((1, 2, 5, 4), (1, 2, 3, 0)),
    ((1, 2, 3, 4, 5), (1, 1, 2, 0, 0, 3)),
]


@pytest.mark.parametrize(("shape", "pad"), PADS, ids=["1d", "1d-wide", "2d", "3d"])
def test_replication_pad_backward_is_decomposed(shape: tuple[int, ...],
                                                pad: tuple[int, ...]) -> None:
    _check(lambda a: F.pad(a, pad, mode="replicate") * 3, torch.randn(shape))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_gradients_accumulate_in_float32(dtype: torch.dtype) -> None:
    # eight output positions add into each input one: a bf16 running sum would round
    # after every add; eager's nearest backward (and this) rounds once
    x = torch.randn(1, 2, 3, 3).to(dtype)
    _check(lambda a: F.interpolate(a, scale_factor=(4, 2), mode="nearest"), x, tol=0.0)
    # eager's replication-pad backward sums in bf16 (an edge element can be a rounding
    # away from this float32 sum): the dtype's default tolerance
    _check(lambda a: F.pad(a, (4, 4, 0, 0), mode="replicate"), x)


def test_symbolic_sizes_keep_the_op_whole() -> None:
    from ember.aot.resample_grad_decompositions import RESAMPLE_GRAD_DECOMPOSITIONS

    backward = RESAMPLE_GRAD_DECOMPOSITIONS[torch.ops.aten.upsample_nearest2d_backward.default]
    grad = torch.randn(1, 1, 4, 4)
    assert backward(grad, [4, 4.0], [1, 1, 2, 2]) is NotImplemented
    pad = RESAMPLE_GRAD_DECOMPOSITIONS[torch.ops.aten.replication_pad1d_backward.default]
    assert pad(torch.randn(1, 1, 3), torch.randn(1, 1, 4), [-1, 0]) is NotImplemented
