"""What is stored instead of inlined (lowering/inlining.py): costly values read broadcast
(rotary embeddings' cos/sin) and shared wide values (a residual stream) are computed once;
costly values read at their own size stay fused."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.loop_ir import Compute, Kernel
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.scheduler import KernelStep, schedule
from helpers import compile_fn, trace


def _kernels(fn: Callable[..., Any], *inputs: torch.Tensor) -> list[Kernel]:
    steps = schedule(GraphLowering(trace(fn, list(inputs))).run())
    return [s.kernel for s in steps if isinstance(s, KernelStep)]


def _check(fn: Callable[..., Any], *inputs: torch.Tensor) -> None:
    compiled, run = compile_fn(fn, *inputs)
    torch.testing.assert_close(run(*inputs)[0], fn(*inputs), rtol=1e-5, atol=1e-5)
    assert compiled.metadata["fallbacks"] == {}


def _size(k: Kernel) -> int:
    return math.prod(v.size for v in (*k.ranges, *k.reduction_ranges))


def _computing(kernels: list[Kernel], op: str) -> list[Kernel]:
    return [k for k in kernels if any(isinstance(s, Compute) and s.op == op for s in k.body)]


def rotary(q: torch.Tensor, k: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    # HF Llama's rotary embedding: cos/sin of (seq, head_dim), broadcast over batch and heads
    pos = torch.arange(q.shape[2], dtype=torch.float32)
    freqs = pos[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), -1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), -1)

    q2 = q * cos + rotate_half(q) * sin
    k2 = k * cos + rotate_half(k) * sin
    return q2 + k2


def test_costly_value_read_broadcast_is_computed_once_at_its_size() -> None:
    b, h, s, d = 2, 8, 16, 8
    q, k = torch.randn(b, h, s, d), torch.randn(b, h, s, d)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    _check(rotary, q, k, inv_freq)
    kernels = _kernels(rotary, q, k, inv_freq)
    # before: cos and sin inlined into the (b, h, s, d) kernel, 2 * h * b times too often
    for op in ("cos", "sin"):
        (once,) = _computing(kernels, op)
        assert _size(once) == s * d


def test_costly_value_read_at_its_own_size_stays_fused() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        e = x.exp()
        return e * y + e

    x, y = torch.randn(4, 32), torch.randn(4, 32)
    _check(f, x, y)
    assert len(_kernels(f, x, y)) == 1


def test_cheap_value_read_broadcast_is_inlined() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x * 2 + 1)[None] * y

    x, y = torch.randn(4, 32), torch.randn(8, 4, 32)
    _check(f, x, y)
    assert len(_kernels(f, x, y)) == 1


def residual(x: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
    h = x
    for w in weights:  # a decoder layer: RMSNorm, a matmul, the residual add
        n = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        h = h + n @ w
    return h


def test_shared_residual_stream_is_stored_not_reread_by_every_layer() -> None:
    x = torch.randn(8, 32)
    weights = [torch.randn(32, 32) / 8 for _ in range(5)]
    _check(residual, x, *weights)
    kernels = _kernels(residual, x, *weights)
    # before: every layer's norm kernel re-read x and every earlier matmul result (6
    # buffers by the last layer); now each residual is stored once recomputing it would
    # load three buffers of its size
    readers_of_x = [k for k in kernels if "arg0" in k.loaded_buffers()]
    assert len(readers_of_x) <= 3
    assert max(len(k.loaded_buffers()) for k in kernels) <= 3


def _blocks(x: torch.Tensor) -> tuple[torch.Tensor]:
    # LongT5's local attention: pad a length to a multiple of the block, cut blocks,
    # concatenate each with its neighbours, re-block
    F = torch.nn.functional
    y = F.pad(x.exp(), (0, 0, 0, -x.shape[1] % 3))
    b = y.reshape(2, -1, 3, 4)
    nb = b.shape[1]
    b = F.pad(b, (0, 0, 0, 0, 1, 1))
    b = torch.cat([b[:, i:i + nb] for i in range(3)], dim=2)
    b = b.reshape(2, nb, 3, 3, 4).transpose(2, 3).reshape(2, -1, 4)
    b = F.pad(b, (0, 0, 0, -b.shape[1] % 2)).reshape(2, -1, 2, 4)
    return (b.sum(2) * 2,)


def test_reshapes_over_a_symbolic_padded_length_store_before_the_index_explodes() -> None:
    # each inlined reshape nested the previous view's floor divisions and remainders:
    # kernels indexed with 97,000-character expressions and lowering took a minute (HF
    # LongT5 under dynamic=True did not compile in 400 s); an index past
    # MAX_INLINED_INDEX_TERMS terms is stored first
    from ember.inductor.compile import compile_program
    from ember.runtime.compiled import load_executor
    from ember.runtime.ir import InputSpec
    from ember.runtime.tracing import GraphRecorder

    rec = GraphRecorder(dynamic=True)
    x = rec.add_input(torch.randn(2, 7, 4), InputSpec("x"), {1: (2, None)})
    with rec:
        outs = _blocks(x)
    p = rec.finish(list(outs))
    p.dialect = "core-functional"
    compiled = compile_program(p, {"strict": True})
    source = "\n".join(v.decode() for k, v in compiled.files.items() if k.endswith(".cpp"))
    assert max(len(line) for line in source.splitlines()) < 20_000
    run = load_executor(compiled)
    for n in (5, 7, 11):
        xs = torch.randn(2, n, 4)
        torch.testing.assert_close(run([xs])[0], _blocks(xs)[0])
