"""Fusion: kernel counts for pointwise chains, normalizations (on their Core ATen
decomposed forms), reduction epilogues and horizontal fusion; intermediates that only a
fused kernel uses are never stored; the wrapper reuses freed buffers."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.loop_ir import Store
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.scheduler import KernelStep, schedule
from helpers import compile_fn


def _check(fn: Callable[..., Any], *inputs: torch.Tensor) -> dict[str, object]:
    compiled, run = compile_fn(fn, *inputs)
    expected = fn(*inputs)
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    for got, want in zip(run(*inputs), expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert compiled.metadata["fallbacks"] == {}
    metadata: dict[str, object] = compiled.metadata
    return metadata


def _stores(fn: Callable[..., Any], *inputs: torch.Tensor) -> list[list[str]]:
    from helpers import trace

    steps = schedule(GraphLowering(trace(fn, list(inputs))).run())
    return [[s.buffer for s in step.kernel.body if isinstance(s, Store)]
            for step in steps if isinstance(step, KernelStep)]


def chain10(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = x * y
    a = a + 1
    a = a.sin()
    a = a * 2
    a = a - y
    a = a.abs()
    a = a + 1
    a = a.sqrt()
    a = a.exp()
    return a.tanh()


def softmax_decomposed(x: torch.Tensor) -> torch.Tensor:
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(-1, keepdim=True)


def layer_norm_decomposed(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    xc = x - mean
    var = (xc * xc).mean(-1, keepdim=True)
    return xc * torch.rsqrt(var + 1e-5) * w + b


def rms_norm_decomposed(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def test_chain_of_ten_pointwise_ops_is_one_kernel() -> None:
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    assert _check(chain10, x, y)["kernels"] == 1
    assert _stores(chain10, x, y) == [["buf0"]]


def test_softmax_decomposed_is_one_kernel_storing_only_its_output() -> None:
    x = torch.randn(6, 33)
    assert _check(softmax_decomposed, x)["kernels"] == 1
    assert len(_stores(softmax_decomposed, x)[0]) == 1


def test_softmax_op_is_one_kernel() -> None:
    assert _check(lambda x: torch.softmax(x, -1), torch.randn(5, 17))["kernels"] == 1


def test_layer_norm_decomposed_is_one_kernel() -> None:
    x, w, b = torch.randn(4, 3, 20), torch.randn(20), torch.randn(20)
    assert _check(layer_norm_decomposed, x, w, b)["kernels"] == 1
    assert len(_stores(layer_norm_decomposed, x, w, b)[0]) == 1


def test_layer_norm_op_is_one_kernel() -> None:
    import torch.nn.functional as F

    x, w, b = torch.randn(4, 20), torch.randn(20), torch.randn(20)
    assert _check(lambda x, w, b: F.layer_norm(x, (20,), w, b), x, w, b)["kernels"] == 1


def test_rms_norm_decomposed_is_one_kernel() -> None:
    x, w = torch.randn(7, 24), torch.randn(24)
    assert _check(rms_norm_decomposed, x, w)["kernels"] == 1


def test_reduction_epilogue_fuses() -> None:
    meta = _check(lambda x: x.sum(-1).abs().sqrt() * 2 + 1, torch.randn(9, 10))
    assert meta["kernels"] == 1


def test_reduction_over_first_dim_with_broadcast_back_fuses() -> None:
    meta = _check(lambda x: x - x.mean(0), torch.randn(9, 10))
    assert meta["kernels"] == 1


def test_independent_same_shape_work_fuses_horizontally() -> None:
    meta = _check(lambda x, y: (x + 1, y * 2, x.sum(-1), y.amax(-1)),
                  torch.randn(4, 8), torch.randn(4, 8))
    assert meta["kernels"] == 1


def test_read_at_another_index_is_not_forwarded() -> None:
    # m is reduced over rows; the consumer reads m[5 - i] while the kernel computing m is
    # at row i, so it cannot fuse and must run in a later kernel, still right.
    meta = _check(lambda x: x * x.amax(1).flip(0)[:, None], torch.randn(6, 6))
    assert meta["kernels"] == 2


def test_wrapper_reuses_freed_buffers() -> None:
    w = torch.randn(16, 16)

    def f(x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            x = (x.relu() + 1) @ w
        return x

    compiled, run = compile_fn(f, torch.randn(4, 16))
    wrapper = compiled.files["forward/wrapper.py"].decode()
    assert "reuse" in wrapper
    torch.testing.assert_close(run(torch.ones(4, 16))[0], f(torch.ones(4, 16)))


def test_deep_residual_stream_is_stored_not_recomputed() -> None:
    import torch.nn.functional as F
    from ember.inductor.lowering.inlining import MAX_INLINED_BUFFERS

    ws = [torch.randn(16, 16) for _ in range(12)]

    def f(x: torch.Tensor) -> torch.Tensor:
        for w in ws:
            x = x + torch.softmax(F.layer_norm(x, (16,)) @ w, -1) * 0.1
        return x

    x = torch.randn(4, 16)
    _, run = compile_fn(f, x)
    torch.testing.assert_close(run(x)[0], f(x))
    from helpers import trace

    steps = schedule(GraphLowering(trace(f, [x])).run())
    for step in steps:
        if isinstance(step, KernelStep):
            assert len(step.kernel.loaded_buffers()) <= MAX_INLINED_BUFFERS + 2


def test_matmul_result_goes_into_freed_memory_of_its_layout() -> None:
    # the relu and the sin write in place of the matmul results they read last
    # (codegen/memory_plan.py): two allocations per call; a third matmul's result goes
    # into the first's memory through mm's out= variant (see OUT_VARIANTS in
    # codegen/wrapper.py)
    def f(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return ((x @ w1).relu() @ w2).sin()

    x, w1, w2 = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16, 16)
    compiled, run = compile_fn(f, x, w1, w2)
    wrapper = compiled.files["forward/wrapper.py"].decode()
    assert "buf1 = buf0; del buf0  # written in place of buf0's memory" in wrapper
    assert "kernel0(buf1, buf1)" in wrapper
    assert wrapper.count(" = _empty(") + wrapper.count(" = torch.mm(") <= 2

    def g(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return ((x @ w1).relu() @ w2).sin() @ w2

    compiled, run_g = compile_fn(g, x, w1, w2)
    wrapper = compiled.files["forward/wrapper.py"].decode()
    assert "buf4 = buf1; del buf1  # reuse buf1's memory" in wrapper
    assert "torch.mm(buf3, arg2, out=buf4)" in wrapper
    torch.testing.assert_close(run_g(x, w1, w2)[0], g(x, w1, w2))
    assert "aten.mm.default(" not in wrapper  # the public function: half the dispatch cost
    torch.testing.assert_close(run(x, w1, w2)[0], f(x, w1, w2))
