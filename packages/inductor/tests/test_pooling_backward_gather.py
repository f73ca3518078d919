"""Max and average pooling backward as a gather (``lowering/pooling/covering.py``): each
input position sums the gradients of the windows that contain it.

Against eager, C++ and Triton's interpreter, with the device table as it is and with a
CPU that gathers for every layout: every window shape the candidate arithmetic
distinguishes (windows wider than, as wide as and narrower than their stride, so gaps
between windows; padding past a window's reach, ceil mode's extra window, one-element
windows, symmetric and asymmetric 2-d and 3-d windows, channels-last inputs), with ties
in the max pool (the recorded argmax decides), bit-exact: eager adds a position's
gradients in window order, as the gather does. The generated code: a max pool's backward
in a ResNet stem's training step is one element function, stored by a kernel of its own
or fused into the batch norm's backward (no zero fill, no atomic add); a dilated window
still scatters.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.lowering.pooling.covering import GATHER_LAYOUTS, gather_windows
from ember.inductor.lowering.pooling.window import make_window
from ember.runtime.ir import TensorMeta
from helpers import compile_and_load, trace
from test_norm_kernels import cuda_training_sources

aten = torch.ops.aten

# (kernel, stride, padding, ceil_mode) over 2 dims
WINDOWS_2D: list[tuple[list[int], list[int], list[int], bool]] = [
    ([3, 3], [2, 2], [1, 1], False),  # ResNet's stem: 2 x 2 candidates
    ([2, 2], [2, 2], [0, 0], False),  # one candidate, no overlap
    ([2, 2], [3, 3], [0, 0], True),  # narrower than the stride: gaps, ceil mode
    ([3, 2], [1, 3], [1, 0], True),  # 3 candidates by 1, a gap in the width
    ([5, 5], [1, 1], [2, 2], False),  # 25 candidates
    ([1, 1], [2, 2], [0, 0], False),  # every other position gets nothing
    ([3, 3], [3, 3], [1, 1], True),  # ceil mode's last window starts in the input
    ([4, 3], [2, 2], [2, 1], False),  # padding half the kernel
]


def _ties(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-2, 3, shape, generator=g).float()


def _run(fn: Any, inputs: list[torch.Tensor], backend: str) -> tuple[dict[str, int],
                                                                      list[torch.Tensor]]:
    compiled, run = compile_and_load(trace(fn, inputs), precompile=backend == "cpp")
    return dict(compiled.metadata["fallbacks"]), run(*[x.clone() for x in inputs])


def _meta(shape: tuple[int, ...], channels_last: bool = False) -> TensorMeta:
    t = torch.empty(shape, device="meta")
    if channels_last:
        t = t.contiguous(memory_format=torch.channels_last)
    return TensorMeta(torch.float32, tuple(t.shape), t.stride(), torch.device("cpu"))


def test_candidate_counts_and_the_device_table() -> None:
    nchw, nhwc = _meta((2, 8, 10, 10)), _meta((2, 8, 10, 10), channels_last=True)
    assert gather_windows(make_window(2, [3, 3], [2, 2], [1, 1]), "cuda", nchw) == 4
    assert gather_windows(make_window(2, [2, 2], [2, 2], [0, 0]), "cuda", nchw) == 1
    assert gather_windows(make_window(2, [2, 2], [3, 3], [0, 0]), "cuda", nchw) == 1
    assert gather_windows(make_window(2, [3, 3], [1, 1], [1, 1]), "cuda", nchw) == 9
    assert gather_windows(make_window(3, [3, 3, 3], [2, 2, 2], [1, 1, 1]), "cuda",
                          _meta((1, 2, 6, 6, 6))) == 8
    dilated = make_window(2, [3, 3], [2, 2], [1, 1], [2, 2])
    assert gather_windows(dilated, "cuda", nchw) is None
    # a CPU gathers into channels-last gradients only (a channel dim of one is no layout)
    stem = make_window(2, [3, 3], [2, 2], [1, 1])
    assert gather_windows(stem, "cpu", nchw) is None
    assert gather_windows(stem, "cpu", nhwc) == 4
    assert gather_windows(stem, "cpu", _meta((2, 1, 10, 10), channels_last=True)) is None
    assert set(GATHER_LAYOUTS) == {"cpu", "cuda"}


@pytest.fixture(params=["table", "gather"])
def policy(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The device table as it is, and a CPU that gathers for every layout (so that the
    gather over contiguous gradients runs in C++ and through Triton's interpreter)."""
    if request.param == "gather":
        monkeypatch.setitem(GATHER_LAYOUTS, "cpu", "any")
    return str(request.param)


@pytest.mark.parametrize("channels_last", [False, True])
def test_max_pool2d_backward_matches_eager(backend: str, policy: str,
                                           channels_last: bool) -> None:
    x = _ties((2, 3, 11, 10), 0)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)

    def fn(a: torch.Tensor) -> list[torch.Tensor]:
        out = []
        for k, s, p, ceil in WINDOWS_2D:
            v, i = aten.max_pool2d_with_indices(a, k, s, p, [1, 1], ceil)
            out.append(aten.max_pool2d_with_indices_backward(
                v * 3 + i * 0.25, a, k, s, p, [1, 1], ceil, i))
        return out

    fallbacks, got = _run(fn, [x], backend)
    assert fallbacks == {}
    want = fn(x)
    for k, (g, w) in enumerate(zip(got, want)):
        # eager adds a position's gradients in window order, as the gather does
        torch.testing.assert_close(g, w, rtol=0, atol=0, msg=str(WINDOWS_2D[k]))
        assert g.stride() == w.stride() or not channels_last, (k, g.stride(), w.stride())


def test_max_pool3d_and_unbatched_backward_match_eager(backend: str, policy: str) -> None:
    x5, x3 = _ties((2, 2, 5, 7, 6), 1), _ties((3, 9, 8), 2)

    def fn(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
        out = []
        for k, s, p, ceil in [([3, 3, 3], [2, 2, 2], [1, 1, 1], False),
                              ([2, 3, 2], [2, 1, 3], [1, 1, 0], True)]:
            v, i = aten.max_pool3d_with_indices(a, k, s, p, [1, 1, 1], ceil)
            out.append(aten.max_pool3d_with_indices_backward(v - i * 0.5, a, k, s, p,
                                                             [1, 1, 1], ceil, i))
        v, i = aten.max_pool2d_with_indices(b, [3, 3], [2, 2], [1, 1])
        out.append(aten.max_pool2d_with_indices_backward(v + i * 0.125, b, [3, 3], [2, 2],
                                                         [1, 1], [1, 1], False, i))
        return out

    fallbacks, got = _run(fn, [x5, x3], backend)
    assert fallbacks == {}
    for g, w in zip(got, fn(x5, x3)):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("channels_last", [False, True])
def test_avg_pool2d_backward_matches_eager(backend: str, policy: str, channels_last: bool,
                                           count_include_pad: bool) -> None:
    x = torch.randn(2, 3, 11, 10)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)

    def fn(a: torch.Tensor) -> list[torch.Tensor]:
        out = []
        for (k, s, p, ceil), div in zip(WINDOWS_2D, [None, None, 3, None, None, None, 7, None]):
            if any(pp * 2 > kk for pp, kk in zip(p, k)):
                continue  # eager: padding at most half the kernel
            g = aten.avg_pool2d(a, k, s, p, ceil, count_include_pad, div).cos()
            out.append(aten.avg_pool2d_backward(g, a, k, s, p, ceil, count_include_pad, div))
        return out

    fallbacks, got = _run(fn, [x], backend)
    assert fallbacks == {}
    for g, w in zip(got, fn(x)):
        torch.testing.assert_close(g, w)


def test_training_step_through_a_stem_pool(backend: str, policy: str) -> None:
    """conv -> relu -> max pool -> avg pool: both backward ops inside one compiled
    training step (``ember.frontend.compile``), gradients against eager."""
    import ember.frontend as ef

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                          nn.AvgPool2d(2, 2))
    x = torch.randn(2, 3, 16, 16, requires_grad=True)
    compiled = ef.compile(model)
    compiled(x).sum().backward()
    assert x.grad is not None
    got = [x.grad.clone(), *(p.grad.clone() for p in model.parameters() if p.grad is not None)]
    x.grad = None
    model.zero_grad()
    model(x).sum().backward()
    want = [x.grad, *(p.grad for p in model.parameters())]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def _stem() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 16, 7, stride=2, padding=3), nn.BatchNorm2d(16),
                         nn.ReLU(), nn.MaxPool2d(3, 2, 1))


def test_stem_pool_backward_on_a_gpu() -> None:
    """ResNet's stem on CUDA (generated here, nothing built): no kernel scatters into a
    zeroed gradient; the pool is recomputed in the backward (a pooling window is cheap to
    recompute, and saving it would keep its int64 argmaxes: ``aot`` recompute_rules), one
    kernel records the argmaxes, and the gathered gradient is stored by one kernel, the
    only one reading them; with ``max_pool.STORE_GATHERED`` off (the A/B tool's variant)
    it is computed inside the batch norm's backward kernels instead: its split reduction
    and its gradient, one kernel less."""
    from ember.inductor.lowering.pooling import max_pool

    def backward() -> list[Any]:
        sources = cuda_training_sources(_stem(), (4, 3, 64, 64), torch.channels_last)
        return [s for graph, _, s in sources if graph == "backward"]

    def argmaxes(s: Any) -> list[str]:
        return [k for k, v in s.meta["signature"].items() if v == "*i64"]

    def writers(kernels: list[Any]) -> list[Any]:
        return [s for s in kernels if any(f"tl.store({k}" in s.source for k in argmaxes(s))]

    def readers(kernels: list[Any]) -> list[Any]:
        return [s for s in kernels if any(f"tl.load({k}" in s.source for k in argmaxes(s))]

    assert max_pool.STORE_GATHERED
    stored = backward()
    assert not any("atomic_add" in s.source for s in stored)
    assert len(writers(stored)) == 1
    assert len(readers(stored)) == 1 and not readers(stored)[0].meta.get("split")
    try:
        max_pool.STORE_GATHERED = False
        fused = backward()
    finally:
        max_pool.STORE_GATHERED = True
    assert not any("atomic_add" in s.source for s in fused)
    assert len(fused) == len(stored) - 1
    assert len(readers(fused)) == 2 and any(s.meta.get("split") for s in readers(fused))


def test_a_dilated_pool_still_scatters() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.MaxPool2d(3, 2, 1, dilation=2))
    sources = cuda_training_sources(model, (2, 3, 32, 32))
    assert any("atomic_add" in s.source for graph, _, s in sources if graph == "backward")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_cuda_backward_matches_eager(dtype: torch.dtype, channels_last: bool) -> None:
    """Eager's CUDA kernels gather too, in the same order, accumulating in float32: the
    max pool's gradient is bit-exact against them in float32 and bfloat16. The average's
    is compared with eager's float64 CPU kernel (eager's CUDA kernel for channels-last
    gradients disagreed with its own contiguous one beyond rounding, on an H100; and
    Triton's float32 ``/`` is not IEEE division). The gradients and argmaxes are inputs,
    so that only the backward ops are compiled."""
    x = _ties((4, 8, 23, 20), 3).to(dtype).cuda()
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    inputs, calls = [x], []
    for k, s, p, ceil in WINDOWS_2D:
        v, i = aten.max_pool2d_with_indices(x, k, s, p, [1, 1], ceil)
        inputs += [(v * 3 + i * 0.25).to(dtype), i]
        calls.append(("max", k, s, p, ceil))
        if all(pp * 2 <= kk for pp, kk in zip(p, k)):
            inputs.append(aten.avg_pool2d(x, k, s, p, ceil, True, None).cos())
            calls.append(("avg", k, s, p, ceil))

    def fn(a: torch.Tensor, *rest: torch.Tensor) -> list[torch.Tensor]:
        out, at = [], 0
        for kind, k, s, p, ceil in calls:
            if kind == "max":
                out.append(aten.max_pool2d_with_indices_backward(
                    rest[at], a, k, s, p, [1, 1], ceil, rest[at + 1]))
                at += 2
            else:
                out.append(aten.avg_pool2d_backward(rest[at], a, k, s, p, ceil, True, None))
                at += 1
        return out

    fallbacks, got = _run(fn, inputs, "cuda")
    assert fallbacks == {}
    want = fn(*inputs)
    reference = fn(*[t.cpu().double() if t.is_floating_point() else t.cpu() for t in inputs])
    for n, (g, w, r) in enumerate(zip(got, want, reference)):
        assert g.stride() == w.stride(), (calls[n], g.stride(), w.stride())
        if calls[n][0] == "max":
            torch.testing.assert_close(g, w, rtol=0, atol=0, msg=str(calls[n]))
        else:
            torch.testing.assert_close(g.cpu().double(), r, rtol=2e-2 if dtype == torch.bfloat16
                                       else 1e-6, atol=1e-6, msg=str(calls[n]))


def test_symbolic_sizes(backend: str) -> None:
    """``dynamic=True``: one graph gathers over symbolic heights and widths (a
    channels-last CPU gradient gathers; ceil mode's extra window included)."""
    import ember.frontend as ef

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                          nn.AvgPool2d(2, 2, ceil_mode=True))
    model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    compiled = ef.compile(model, dynamic=True)
    for hw in [(16, 16), (19, 23), (12, 30)]:
        x = torch.randn(2, 3, *hw).contiguous(memory_format=torch.channels_last)
        x.requires_grad_(True)
        compiled(x).sum().backward()
        assert x.grad is not None
        got = x.grad.clone()
        x.grad = None
        model(x).sum().backward()
        torch.testing.assert_close(got, x.grad, msg=str(hw))
