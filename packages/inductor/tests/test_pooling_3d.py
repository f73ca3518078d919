"""3-d pooling (``lowering/pooling/``): ``max_pool3d_with_indices``, ``avg_pool3d``,
``_adaptive_avg_pool3d`` and their backward ops, lowered on C++ and through Triton's
interpreter (the ``backend`` fixture) by the same N-d rules as the 2-d ops.

Against eager: values and the recorded argmax (flat into ``D*H*W``) with ties, NaNs and
-infs, every parameter (kernel, stride, padding, dilation, ceil_mode,
count_include_pad, divisor_override, one-element lists), 4-d (unbatched) and 5-d
inputs, channels-last-3d inputs, empty batches and windows wholly in the padding; the
backward ops alone and a training step through ``ember.frontend.compile``. None of
these falls back any more (it did: the count goes from 6 to 0); a window of more than
``MAX_WINDOW`` elements (s3d's 2x7x7 average) still does, counted. On a GPU the same
against eager's CUDA kernels.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from helpers import compile_and_load, trace

aten = torch.ops.aten

MAX3D = "aten::max_pool3d_with_indices.default"
MAX3D_BACKWARD = "aten::max_pool3d_with_indices_backward.default"
AVG3D = "aten::avg_pool3d.default"
AVG3D_BACKWARD = "aten::avg_pool3d_backward.default"
ADAPTIVE3D = "aten::_adaptive_avg_pool3d.default"
ADAPTIVE3D_BACKWARD = "aten::_adaptive_avg_pool3d_backward.default"
OPS_3D = (MAX3D, MAX3D_BACKWARD, AVG3D, AVG3D_BACKWARD, ADAPTIVE3D, ADAPTIVE3D_BACKWARD)

# (kernel, stride, padding, dilation, ceil_mode)
MAX_POOLS: list[tuple[list[int], list[int], list[int], list[int], bool]] = [
    ([2, 2, 2], [], [0, 0, 0], [1, 1, 1], False),  # stride: the kernel's
    ([3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], False),
    ([1, 3, 3], [1, 2, 2], [0, 1, 1], [1, 1, 1], True),  # s3d's
    ([3, 2, 3], [2, 1, 2], [1, 1, 0], [2, 1, 1], True),
    ([2, 3, 2], [1, 2, 1], [1, 0, 1], [1, 2, 2], False),
    ([3], [2], [1], [1], True),  # one-element lists: every dim's
]
# (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVG_POOLS: list[tuple[list[int], list[int], list[int], bool, bool, int | None]] = [
    ([2, 2, 2], [], [0, 0, 0], False, True, None),
    ([3, 3, 3], [2, 2, 2], [1, 1, 1], False, True, None),
    ([3, 3, 3], [2, 2, 2], [1, 1, 1], True, False, None),
    ([2, 3, 3], [1, 2, 2], [1, 1, 1], True, True, None),
    ([3, 2, 3], [2, 1, 2], [1, 1, 0], False, False, 5),
    ([1, 3, 3], [1, 1, 1], [0, 1, 1], False, True, None),
    ([3], [2], [1], True, True, None),
]
ADAPTIVE_SIZES = [[2, 3, 2], [3, 4, 5], [5, 7, 6], [2, 2, 3]]


def _ties_and_nans(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """Small integers (many ties in a window), a few NaNs and -infs."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=g).float()
    x[torch.rand(shape, generator=g) < 0.04] = float("nan")
    x[torch.rand(shape, generator=g) < 0.04] = float("-inf")
    return x


def _compile(fn: Callable[..., Any], inputs: list[torch.Tensor], backend: str
             ) -> tuple[dict[str, int], list[torch.Tensor]]:
    """``(fallbacks, results)`` of ``fn`` compiled for ``backend`` and run on ``inputs``."""
    compiled, run = compile_and_load(trace(fn, inputs), precompile=backend == "cpp")
    return dict(compiled.metadata["fallbacks"]), run(*[x.clone() for x in inputs])


def _assert_same(got: list[torch.Tensor], want: list[torch.Tensor], exact: bool = False,
                 strides: bool = False) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, g.shape, w.shape)
        if exact:
            torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0, msg=str(k))
        else:
            torch.testing.assert_close(g, w, equal_nan=True, msg=str(k))
        if strides and w.numel() > 1:
            assert g.stride() == w.stride(), (k, g.stride(), w.stride())


def _max_pools(x: torch.Tensor) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for k, s, p, d, ceil in MAX_POOLS:
        out += list(aten.max_pool3d_with_indices(x, k, s, p, d, ceil))
    return out


def test_max_pool3d_values_and_argmax_match_eager(backend: str) -> None:
    x5, x4 = _ties_and_nans((2, 3, 5, 7, 6), 1), _ties_and_nans((3, 4, 5, 6), 2)

    def fn(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
        # a relu in front: the input of pools whose argmax is read is stored first
        return _max_pools(a) + _max_pools(b) + list(
            aten.max_pool3d_with_indices(torch.relu(a), [3, 3, 3], [2, 2, 2], [1, 1, 1]))

    fallbacks, got = _compile(fn, [x5, x4], backend)
    assert fallbacks == {}
    _assert_same(got, fn(x5, x4), exact=True)


def test_max_pool3d_values_alone_match_eager(backend: str) -> None:
    """Inference: only the values are read (a chain of maximums, no argmax)."""
    x = _ties_and_nans((2, 3, 5, 7, 6), 3)

    def fn(a: torch.Tensor) -> list[torch.Tensor]:
        return [v * 2 for v in _max_pools(a)[::2]]

    fallbacks, got = _compile(fn, [x], backend)
    assert fallbacks == {}
    _assert_same(got, fn(x), exact=True)


def test_max_pool3d_windows_in_the_padding_and_all_minus_inf(backend: str) -> None:
    """Dilation 3 over a depth of 2: the window's two depths are -1 and 2, both in the
    padding (eager reports its start moved forward by the dilation); an all -inf window
    reports its first valid position."""
    x = torch.randn(1, 2, 2, 3, 4)
    x[0, 1] = float("-inf")

    def fn(a: torch.Tensor) -> list[torch.Tensor]:
        return [*aten.max_pool3d_with_indices(a, [2, 2, 2], [1, 1, 1], [1, 1, 1], [3, 1, 1]),
                *aten.max_pool3d_with_indices(a, [2, 3, 3], [2, 2, 2], [1, 1, 1])]

    fallbacks, got = _compile(fn, [x], backend)
    assert fallbacks == {}
    _assert_same(got, fn(x), exact=True)


def _avg_pools(x: torch.Tensor) -> list[torch.Tensor]:
    return [aten.avg_pool3d(x, k, s, p, ceil, pad, div) for k, s, p, ceil, pad, div in AVG_POOLS]


def _adaptive_pools(x: torch.Tensor) -> list[torch.Tensor]:
    return [aten._adaptive_avg_pool3d(x, size) for size in ADAPTIVE_SIZES]


def test_avg_and_adaptive_avg_pool3d_match_eager(backend: str) -> None:
    x5, x4 = torch.randn(2, 3, 5, 7, 6), torch.randn(3, 4, 5, 6)

    def fn(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
        return _avg_pools(a) + _avg_pools(b) + _adaptive_pools(a) + _adaptive_pools(b)

    fallbacks, got = _compile(fn, [x5, x4], backend)
    assert fallbacks == {}
    _assert_same(got, fn(x5, x4))


def test_backward_ops_match_eager(backend: str) -> None:
    x5, x4 = torch.randn(2, 3, 5, 7, 6), torch.randn(3, 4, 5, 6)

    def fn(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
        out = []
        for x in (a, b):
            for k, s, p, d, ceil in MAX_POOLS[1:4]:
                v, i = aten.max_pool3d_with_indices(x, k, s, p, d, ceil)
                out.append(aten.max_pool3d_with_indices_backward(v.sin(), x, k, s, p, d,
                                                                 ceil, i))
            for k, s, p, ceil, pad, div in AVG_POOLS[1:5]:
                g = aten.avg_pool3d(x, k, s, p, ceil, pad, div).cos()
                out.append(aten.avg_pool3d_backward(g, x, k, s, p, ceil, pad, div))
            for size in ADAPTIVE_SIZES[:2]:
                g = aten._adaptive_avg_pool3d(x, size).cos()
                out.append(aten._adaptive_avg_pool3d_backward(g, x))
        return out

    fallbacks, got = _compile(fn, [x5, x4], backend)
    assert fallbacks == {}
    _assert_same(got, fn(x5, x4))


def test_channels_last_3d_inputs(backend: str) -> None:
    x = torch.randn(2, 4, 5, 6, 7).to(memory_format=torch.channels_last_3d)

    def fn(a: torch.Tensor) -> list[torch.Tensor]:
        return [*aten.max_pool3d_with_indices(a, [3, 3, 3], [2, 2, 2], [1, 1, 1]),
                aten.avg_pool3d(a, [2, 3, 3], [1, 2, 2], [1, 1, 1], True, False),
                aten._adaptive_avg_pool3d(a, [2, 3, 4])]

    fallbacks, got = _compile(fn, [x], backend)
    assert fallbacks == {}
    _assert_same(got, fn(x), strides=True)


def test_empty_and_size_one_inputs(backend: str) -> None:
    empty, ones, thin = torch.randn(0, 3, 4, 4, 4), torch.randn(1, 1, 1, 1, 1), torch.randn(
        2, 1, 4, 1, 3)

    def fn(e: torch.Tensor, o: torch.Tensor, t: torch.Tensor) -> list[torch.Tensor]:
        out = []
        for x in (e, o, t):
            v, i = aten.max_pool3d_with_indices(x, [1, 1, 1], [1, 1, 1], [0, 0, 0])
            out += [v, i, aten.max_pool3d_with_indices_backward(v + 1, x, [1, 1, 1],
                                                                [1, 1, 1], [0, 0, 0],
                                                                [1, 1, 1], False, i)]
            out += [aten.avg_pool3d(x, [1, 1, 1], [1, 1, 1], [0, 0, 0])]
        out += list(aten.max_pool3d_with_indices(e, [2, 2, 2], [2, 2, 2]))
        out += [aten.avg_pool3d_backward(torch.ones(0, 3, 2, 2, 2), e, [2, 2, 2], [2, 2, 2],
                                         [0, 0, 0], False, True, None)]
        v, i = aten.max_pool3d_with_indices(t, [3, 1, 3], [1, 1, 1], [1, 0, 1])
        out += [v, i, aten.avg_pool3d(t, [3, 1, 2], [2, 1, 1], [1, 0, 1], True, False)]
        return out

    fallbacks, got = _compile(fn, [empty, ones, thin], backend)
    assert fallbacks == {}
    _assert_same(got, fn(empty, ones, thin))


def test_a_dim_pooled_to_one_position(backend: str) -> None:
    """An output dim of size 1 with padding: its window elements sit at constant
    positions, in the padding (left out) or inside (no check): no check on a constant
    is emitted (Triton's interpreter rejected such 0-d masks); 2-d pooling too."""
    x3, x2 = torch.randn(2, 2, 1, 5, 4), torch.randn(2, 2, 5, 7)
    y3 = torch.randn(2, 2, 2, 5, 4)  # eager's average pooling wants a depth >= the kernel's

    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> list[torch.Tensor]:
        k, s, p = [3, 3, 2], [2, 2, 2], [1, 1, 1]
        v, i = aten.max_pool3d_with_indices(a, k, s, p, [1, 1, 1], True)
        ka, sa = [2, 3, 2], [3, 2, 2]
        avg = aten.avg_pool3d(c, ka, sa, p, True, False)
        v2, i2 = aten.max_pool2d_with_indices(b, [3, 1], [2, 2], [1, 0], [3, 1], True)
        return [v, i, aten.max_pool3d_with_indices_backward(v.sin(), a, k, s, p, [1, 1, 1],
                                                            True, i),
                avg, aten.avg_pool3d_backward(avg.cos(), c, ka, sa, p, True, False, None),
                aten._adaptive_avg_pool3d_backward(aten._adaptive_avg_pool3d(a, [1, 2, 3]), a),
                v2, i2]

    assert fn(x3, x2, y3)[3].shape[2] == 1
    fallbacks, got = _compile(fn, [x3, x2, y3], backend)
    assert fallbacks == {}
    _assert_same(got, fn(x3, x2, y3))


def _all_3d_ops(x: torch.Tensor) -> list[torch.Tensor]:
    v, i = aten.max_pool3d_with_indices(x, [3, 3, 3], [2, 2, 2], [1, 1, 1])
    a = aten.avg_pool3d(x, [2, 2, 2], [1, 1, 1])
    m = aten._adaptive_avg_pool3d(x, [2, 2, 2])
    return [v, aten.max_pool3d_with_indices_backward(v, x, [3, 3, 3], [2, 2, 2], [1, 1, 1],
                                                     [1, 1, 1], False, i),
            a, aten.avg_pool3d_backward(a, x, [2, 2, 2], [1, 1, 1], [0, 0, 0], False, True,
                                        None),
            m, aten._adaptive_avg_pool3d_backward(m, x)]


def test_the_3d_ops_no_longer_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.inductor.lowering.registry import LOWERINGS

    x = torch.randn(1, 2, 4, 5, 4)
    program = trace(_all_3d_ops, [x])
    assert set(OPS_3D) == {n.target for n in program.forward.nodes if n.op == "call"
                           and "pool" in str(n.target)}
    for op in OPS_3D:  # as the inductor was: no rule for the 3-d ops
        monkeypatch.delitem(LOWERINGS, op)
    compiled, _ = compile_and_load(trace(_all_3d_ops, [x]))
    assert compiled.metadata["fallbacks"] == {op: 1 for op in OPS_3D}
    monkeypatch.undo()
    compiled, run = compile_and_load(program)
    assert compiled.metadata["fallbacks"] == {}
    _assert_same(run(x), _all_3d_ops(x))


def test_a_window_too_large_to_unroll_still_falls_back(backend: str) -> None:
    """s3d's 2x7x7 average pooling and a 4x4x5 max pooling: more than MAX_WINDOW (64)
    elements; counted extern calls, eager's values."""
    from ember.inductor.lowering.pooling import MAX_WINDOW

    assert 4 * 4 * 5 > MAX_WINDOW >= 4 * 4 * 4
    x = torch.randn(1, 2, 4, 8, 8)

    def fn(a: torch.Tensor) -> list[torch.Tensor]:
        v, i = aten.max_pool3d_with_indices(a, [4, 4, 5], [1, 2, 2])
        small, j = aten.max_pool3d_with_indices(a, [4, 4, 4], [1, 2, 2])  # lowered
        avg = aten.avg_pool3d(a, [2, 7, 7], [1, 1, 1])
        return [v, i, small, j, avg, aten.avg_pool3d_backward(avg, a, [2, 7, 7], [1, 1, 1],
                                                              [0, 0, 0], False, True, None)]

    fallbacks, got = _compile(fn, [x], backend)
    assert fallbacks == {MAX3D: 1, AVG3D: 1, AVG3D_BACKWARD: 1}
    _assert_same(got, fn(x))


# -- training: the aot stage derives the backward ops, the inductor lowers them ----------
class _VideoPools(torch.nn.Module):
    """The 3-d pooling of video nets: s3d's (1, 3, 3) max pooling, a 2x2x2 one, an
    average pooling without its padding counted, an adaptive one."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.max_pool3d(torch.relu(x), (1, 3, 3), (1, 2, 2), (0, 1, 1), ceil_mode=True)
        z = F.avg_pool3d(y, 3, 2, 1, ceil_mode=True, count_include_pad=False)
        w = F.adaptive_avg_pool3d(F.max_pool3d(x, 2, 1, 1, ceil_mode=True), (2, 3, 2))
        v = F.avg_pool3d(x * 2, 2, divisor_override=3)
        return torch.cat([z.flatten(), w.flatten(), v.flatten()])


@pytest.mark.parametrize("shape", [(2, 3, 4, 9, 8), (3, 5, 7, 6)], ids=["5d", "4d"])
def test_training_gradients_match_eager(backend: str, shape: tuple[int, ...]) -> None:
    import ember.frontend

    model = _VideoPools()
    options = {"precompile": False} if backend == "triton" else {}
    compiled = ember.frontend.compile(model, options=options)
    x = torch.randn(*shape, requires_grad=True)
    out = compiled(x)
    want = model(x.detach().requires_grad_())
    torch.testing.assert_close(out, want)
    cotangent = torch.randn_like(out)
    out.backward(cotangent)
    xe = x.detach().clone().requires_grad_()
    model(xe).backward(cotangent)
    assert x.grad is not None
    torch.testing.assert_close(x.grad, xe.grad)
    assert compiled.stats.fallbacks == 0 and compiled.stats.eager_fallback_calls == 0


# -- on a GPU: against eager's CUDA kernels -----------------------------------------------
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cuda_matches_eager(dtype: torch.dtype) -> None:
    import ember.frontend

    x5 = _ties_and_nans((2, 3, 5, 7, 6), 4).to(dtype).cuda()
    x4 = torch.randn(3, 4, 5, 6, dtype=dtype, device="cuda")

    def fn(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
        return _max_pools(a) + _max_pools(b) + _avg_pools(b) + _adaptive_pools(b)

    fallbacks, got = _compile(fn, [x5, x4], "cuda")
    assert fallbacks == {}
    _assert_same(got, fn(x5, x4))
    # the backward ops (accumulating atomic adds) through a training step
    model = _VideoPools()
    compiled = ember.frontend.compile(model)
    x = torch.randn(2, 3, 4, 9, 8, device="cuda", requires_grad=True)
    out = compiled(x)
    out.backward(torch.ones_like(out))
    xe = x.detach().clone().requires_grad_()
    model(xe).backward(torch.ones_like(out))
    assert x.grad is not None and compiled.stats.fallbacks == 0
    torch.testing.assert_close(x.grad, xe.grad)
