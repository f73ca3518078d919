"""Real Triton kernels on a CUDA GPU: the op table (float32 and bfloat16, contiguous and
strided), looped reductions, fused norms, and the on-disk kernel cache. Skipped without
CUDA; run on the H200 test machine (tools/gpu/h200_triton.sh)."""

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
from op_table import table_batch

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]

# bf16 chains of transcendental ops (chain10) amplify one-ulp differences between
# libdevice and eager CUDA math: a looser bf16 tolerance than the CPU op tests.
TOL = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}


def _run(fn: Callable[..., Any], xs: list[torch.Tensor]) -> tuple[Any, list[torch.Tensor]]:
    compiled, run = compile_and_load(trace(fn, xs))
    return compiled, run(*[x.clone() for x in xs])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("contiguous", [True, False])
def test_op_table_on_gpu(dtype: torch.dtype, contiguous: bool) -> None:
    batch, expected = table_batch(dtype, contiguous, "cuda")
    compiled, outs = _run(batch.fn, batch.inputs)
    assert compiled.metadata["kernels"] >= 1
    failures = []
    for name, got in batch.split(outs).items():
        for a, e in zip(got, expected[name]):
            tol = TOL.get(e.dtype, TOL.get(dtype, 0.0))
            try:
                torch.testing.assert_close(a, e, rtol=tol, atol=tol, equal_nan=True,
                                           check_stride=False)
            except AssertionError as err:
                failures.append(f"{name}: {str(err).splitlines()[0]}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("cols", [64, 1000, 4096, 12000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norms_and_reductions_on_gpu(cols: int, dtype: torch.dtype) -> None:
    x = torch.randn(300, cols, device="cuda", dtype=dtype)
    w = torch.randn(cols, device="cuda", dtype=dtype)

    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        sm = torch.softmax(x, -1)
        ln = F.layer_norm(x, (cols,), w)
        rms = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(dtype) * w
        return sm, ln, rms, x.sum(-1), x.amax(-1), x.argmax(-1), x.float().var(-1)

    _, outs = _run(fn, [x, w])
    for a, e in zip(outs, fn(x, w)):
        tol = TOL[dtype] if e.dtype == dtype else 1e-3
        torch.testing.assert_close(a, e, rtol=tol, atol=tol, check_stride=False)


def test_split_and_column_reductions_on_gpu() -> None:
    x = torch.randn(3, 1_000_000, device="cuda")
    y = torch.randn(20000, 512, device="cuda")

    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x.sum(), x.mean(-1), x.amax(), y.sum(0), y.amax(0)

    compiled, outs = _run(fn, [x, y])
    sources = "".join(v.decode() for k, v in compiled.files.items() if k.endswith(".py"))
    assert "_partial" in sources
    for a, e in zip(outs, fn(x, y)):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-2, check_stride=False)


def test_pointwise_over_2_31_elements_uses_int64() -> None:
    n = (1 << 31) + 4096
    x = torch.ones(n, device="cuda", dtype=torch.int8)
    compiled, (out,) = _run(lambda x: x + 1, [x])
    sources = [v.decode() for k, v in compiled.files.items() if k.endswith(".py")
               and not k.endswith("wrapper.py")]
    assert any("tl.int64" in s for s in sources)
    assert out[-1].item() == 2 and out[0].item() == 2 and int(out.sum(dtype=torch.int64)) == 2 * n


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv_block_layouts_on_gpu(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """Convolutions run channels-last, the kernels around them match eager and the
    caller gets eager's strides. TF32 is off: cuDNN's TF32 algorithms for the two
    layouts differ by about 1e-3, which would hide a real float32 error."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    from ember.inductor.buffers import ExternCall
    from ember.inductor.lowering.graph_lowering import GraphLowering
    from ember.inductor.lowering.layout import is_channels_last

    def block(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        y = torch.relu(F.conv2d(x, w1, padding=1) * 0.5 + 0.1)
        return torch.relu(F.conv2d(y, w2, padding=1) + y)

    torch.manual_seed(0)
    xs = [torch.randn(4, 16, 20, 20), torch.randn(32, 16, 3, 3) * 0.1,
          torch.randn(32, 32, 3, 3) * 0.1]
    xs = [x.to("cuda", dtype) for x in xs]
    lowered = GraphLowering(trace(block, xs)).run()
    convs = [n for n in lowered.nodes if isinstance(n, ExternCall)
             and n.target == "aten::convolution.default"]
    assert len(convs) == 2
    for conv in convs:
        _, sizes, strides = conv.result_meta[0]
        assert is_channels_last(sizes, strides)
    _, (got,) = _run(block, xs)
    want = block(*xs)
    torch.testing.assert_close(got.float(), want.float(), rtol=TOL[dtype], atol=TOL[dtype])
    assert got.stride() == want.stride()


def test_unaligned_matmuls_run_padded_on_gpu() -> None:
    """GPT-2's LM head, forward and backward, at a vocabulary of 50257: the backward's
    ``d @ w`` (K unaligned) and ``dᵀ @ h`` (M unaligned) run on one zero-padded copy of
    ``d``, cuBLAS on aligned operands, and match eager."""

    def fn(d: torch.Tensor, w: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return d @ w, d.t() @ h, h @ w.t()

    torch.manual_seed(0)
    vocab = 50257
    xs = [torch.randn(1024, vocab, device="cuda", dtype=torch.bfloat16) / 100,
          torch.randn(vocab, 768, device="cuda", dtype=torch.bfloat16) / 10,
          torch.randn(1024, 768, device="cuda", dtype=torch.bfloat16)]
    compiled, outs = _run(fn, xs)
    wrapper = "".join(v.decode() for k, v in compiled.files.items() if k.endswith("wrapper.py"))
    assert "padded for aligned loads: K 50257 -> 50264" in wrapper
    assert "padded for aligned loads: M 50257 -> 50264" in wrapper
    for got, want in zip(outs, fn(*xs)):
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)


def test_a_checked_gather_in_a_column_reduction_splits_on_gpu() -> None:
    """An embedding inside a column reduction still runs as a split reduction on the GPU
    and matches eager."""

    def fn(ids: torch.Tensor, w: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return (F.embedding(ids, w) * g).sum(0)

    xs = [torch.randint(0, 1000, (8192,), device="cuda"),
          torch.randn(1000, 768, device="cuda"), torch.randn(8192, 768, device="cuda")]
    compiled, outs = _run(fn, xs)
    sources = "".join(v.decode() for k, v in compiled.files.items() if k.endswith(".py"))
    assert "_partial(" in sources
    torch.testing.assert_close(outs[0], fn(*xs), rtol=1e-3, atol=1e-3)


def test_position_ids_cumsum_is_a_kernel_on_gpu() -> None:
    """HF GPT-2's and Llama's position ids: the cumsum runs as a masked sum in one
    kernel with its producer and consumer (``lowering/scans.py``), no fallback."""

    def fn(mask: torch.Tensor) -> torch.Tensor:
        return (mask.ne(0).cumsum(-1) * mask - 1).clamp(min=0)

    mask = (torch.rand(16, 512, device="cuda") > 0.2).long()
    compiled, outs = _run(fn, [mask])
    assert compiled.metadata["fallbacks"] == {}
    assert torch.equal(outs[0], fn(mask))
