"""Random ops lowered to counter-based random numbers (``lowering/random.py``).

They run in the kernels, not as fallbacks; a call is reproducible under
``torch.manual_seed`` and consecutive calls differ; each op draws its own stream; the
values have the right distributions; the C++ and Triton (interpreter) kernels give the
same uniform values bit for bit, and both equal a plain numpy Philox 4x32-10 written
here from the algorithm's definition (Triton's ``tl.rand`` conventions).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.buffers import ExternCall
from ember.inductor.lowering.extern_args import ConstantArg, ListArg
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.lowering.rng_seed import RNG_SEED_BOUND
from ember.inductor.lowering.random import MAX_RANDINT_RANGE, RANDOM_LOWERINGS
from ember.inductor.lowering.registry import LOWERINGS
from ember.inductor.scheduler import KernelStep, schedule
from ember.runtime.ir import Program
from helpers import compile_and_load, trace

aten = torch.ops.aten
N = 2**16
SHAPE = (256, 256)


# -- a reference Philox 4x32-10, from the algorithm (Salmon et al., SC'11) ---------------
_M32 = np.uint64(0xFFFFFFFF)


def philox_words(key: int, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first two output words of Philox 4x32-10 for key ``(lo32(key), hi32(key))``
    and counters ``(lo32(offset), hi32(offset), 0, 0)``; uint64 arrays of 32-bit values."""
    k0, k1 = np.uint64(key & 0xFFFFFFFF), np.uint64((key >> 32) & 0xFFFFFFFF)
    o = offsets.astype(np.uint64)
    c0, c1 = o & _M32, o >> np.uint64(32)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c0  # 32 x 32 bits: exact in 64
        p2 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p2 >> np.uint64(32)) ^ c1 ^ k0, p2 & _M32,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & _M32)
        k0 = (k0 + np.uint64(0x9E3779B9)) & _M32
        k1 = (k1 + np.uint64(0xBB67AE85)) & _M32
    return c0, c1


def to_uniform(word: np.ndarray) -> np.ndarray:
    x = word.astype(np.uint32).view(np.int32)
    return np.where(x < 0, ~x, x).astype(np.float32) * np.float32(4.6566127342e-10)


def reference_rand(key: int, n: int) -> np.ndarray:
    return to_uniform(philox_words(key, np.arange(n))[0])


def reference_randn(key: int, n: int) -> np.ndarray:
    w0, w1 = philox_words(key, np.arange(n))
    u1 = np.maximum(np.float32(1e-7), to_uniform(w0))
    th = np.float32(6.283185307179586) * to_uniform(w1)
    return np.sqrt(np.float32(-2.0) * np.log(u1)) * np.cos(th)


def graph_seed(seed: int, device: str = "cpu") -> int:
    """The seed a compiled graph draws first after ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    return int(torch.randint(0, RNG_SEED_BOUND, (), dtype=torch.int64, device=device))


def test_reference_uniform_stays_below_one() -> None:
    # the largest word magnitude (2**31 - 1) rounds to 2**31 as a float32
    assert np.float32(2**31) * np.float32(4.6566127342e-10) < 1.0
    assert to_uniform(np.array([0x7FFFFFFF, 0x80000000, 0, 0xFFFFFFFF], np.uint64)).max() < 1


# -- compiling ---------------------------------------------------------------------------
def _compile(fn: Callable[..., Any], *inputs: torch.Tensor, **options: Any
             ) -> tuple[Program, Callable[..., list[Any]]]:
    return compile_and_load(trace(fn, inputs), **options)


def _all_random_ops(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (aten.rand.default([4, 3]), aten.randn.default([5], dtype=torch.float64),
            aten.rand_like.default(x), aten.randn_like.default(x),
            aten.uniform.default(x, -2.0, 3.0), aten.bernoulli.p(x, 0.3),
            aten.bernoulli.default(x.sigmoid()), aten.randint.low(3, 9, [6]),
            *aten.native_dropout.default(x, 0.25, True))


def test_random_lowerings_are_listed() -> None:
    from ember.inductor.lowering import random

    registered = {op for op, rule in LOWERINGS.items() if rule.__module__ == random.__name__}
    assert registered == set(RANDOM_LOWERINGS)


def test_random_ops_lower_without_fallbacks_and_draw_one_seed() -> None:
    program = trace(_all_random_ops, [torch.randn(8, 16)])
    lowered = GraphLowering(program).run()
    assert not lowered.fallbacks
    externs = [n for n in lowered.nodes if isinstance(n, ExternCall)]
    assert [(e.target, e.is_fallback) for e in externs] == [("aten::randint.low", False)]
    assert externs[0].args == [ConstantArg(0), ConstantArg(2**62), ListArg(())]
    assert externs[0].kwargs == {"dtype": ConstantArg(torch.int64),
                                 "device": ConstantArg(torch.device("cpu"))}
    compiled, run = compile_and_load(program)
    assert compiled.metadata["fallbacks"] == {}
    wrapper = compiled.files["forward/wrapper.py"].decode()
    assert wrapper.count("aten.randint.low(") == 1
    outs = run(torch.randn(8, 16))
    expected = [t for t in _all_random_ops(torch.randn(8, 16))]
    assert [(o.dtype, o.shape) for o in outs] == [(e.dtype, e.shape) for e in expected]


def test_loop_ir_of_two_random_ops() -> None:
    program = trace(lambda x: aten.rand_like(x) + aten.randn_like(x), [torch.randn(4, 8)])
    from ember.inductor.loop_ir import format_kernel

    steps = schedule(GraphLowering(program).run())
    kernels = [format_kernel(s.kernel) for s in steps if isinstance(s, KernelStep)]
    assert kernels == ["""\
kernel kernel0(buf0: int64[], buf1: float32[4, 8]) over [x0<4, x1<8]:
    v0: int64 = load buf0[0]
    v1: int64 = 0
    v2: int64 = add(v0, v1)
    v3: int64 = index (x0*8 + x1)
    v4: float32 = rand(v2, v3)
    v5: int64 = 1
    v6: int64 = add(v0, v5)
    v7: float32 = randn(v6, v3)
    v8: float32 = add(v4, v7)
    store buf1[(x0*8 + x1)] = v8"""]


def test_reproducible_under_manual_seed_and_different_across_calls() -> None:
    x = torch.randn(8, 16)
    _, run = _compile(_all_random_ops, x)
    torch.manual_seed(3)
    first, second = run(x), run(x)
    torch.manual_seed(3)
    again = run(x)
    for a, b, c in zip(first, second, again):
        assert torch.equal(a, c)
    # every random result of a second call differs (randint's 6 values of 6 could repeat)
    assert all(not torch.equal(a, b) for a, b in zip(first[:7], second[:7]))


def test_two_random_ops_of_one_graph_differ() -> None:
    x = torch.randn(64)
    _, run = _compile(lambda x: (aten.rand_like(x), aten.rand_like(x),
                                 aten.bernoulli.p(x, 0.5), aten.bernoulli.p(x, 0.5)), x)
    a, b, c, d = run(x)
    assert not torch.equal(a, b) and not torch.equal(c, d)


def test_seed_and_counter_contract() -> None:
    """Op k of a graph draws Philox(seed + k) at the row-major index of each element."""
    _, run = _compile(lambda x: (aten.rand_like(x), aten.randn_like(x),
                                 aten.rand_like(x.t())), torch.randn(16, 32))
    x = torch.randn(16, 32)
    seed = graph_seed(11)
    torch.manual_seed(11)
    rand, randn, rand_t = run(x)
    assert np.array_equal(rand.flatten().numpy(), reference_rand(seed, 512))
    np.testing.assert_allclose(randn.flatten().numpy(), reference_randn(seed + 1, 512),
                               rtol=1e-5, atol=1e-5)
    # a transposed result: row-major over its own (32, 16) sizes
    assert rand_t.shape == (32, 16)
    assert np.array_equal(rand_t.flatten().numpy(), reference_rand(seed + 2, 512))


# -- distributions -------------------------------------------------------------------------
def _draw(fn: Callable[[torch.Tensor], torch.Tensor], dtype: torch.dtype = torch.float32
          ) -> torch.Tensor:
    x = torch.randn(SHAPE).to(dtype)
    _, run = _compile(fn, x)
    torch.manual_seed(0)
    return run(x)[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16,
                                   torch.bfloat16])
def test_rand_is_uniform(dtype: torch.dtype) -> None:
    u = _draw(aten.rand_like.default, dtype)
    assert u.dtype == dtype
    assert 0 <= u.min() and u.max() < 1
    u = u.double()
    assert abs(u.mean() - 0.5) < 0.01
    assert abs(u.var() - 1 / 12) < 0.005
    # ten equal bins get about a tenth each
    counts = torch.histc(u, bins=10, min=0, max=1)
    assert (counts / N - 0.1).abs().max() < 0.01


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_randn_is_standard_normal(dtype: torch.dtype) -> None:
    z = _draw(aten.randn_like.default, dtype).double()
    assert abs(z.mean()) < 0.02
    assert abs(z.std() - 1) < 0.02
    assert abs((z.abs() < 1).double().mean() - 0.6827) < 0.01  # one sigma
    assert z.abs().max() < 6


def test_uniform_range_and_moments() -> None:
    u = _draw(lambda x: aten.uniform.default(x, -2.0, 3.0)).double()
    assert -2 <= u.min() and u.max() < 3
    assert abs(u.mean() - 0.5) < 0.05
    assert abs(u.var() - 25 / 12) < 0.05


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_bernoulli_p_fraction(p: float) -> None:
    b = _draw(lambda x: aten.bernoulli.p(x, p))
    assert set(b.unique().tolist()) <= {0.0, 1.0}
    assert abs(b.mean().item() - p) < 0.01


def test_bernoulli_of_probabilities() -> None:
    probs = torch.linspace(0, 1, 16).repeat(4096)
    _, run = _compile(aten.bernoulli.default, probs)
    torch.manual_seed(0)
    b = run(probs)[0].view(4096, 16)
    assert torch.equal(b[:, 0], torch.zeros(4096)) and torch.equal(b[:, -1], torch.ones(4096))
    assert (b.mean(0) - torch.linspace(0, 1, 16)).abs().max() < 0.03


@pytest.mark.parametrize("low,high", [(0, 10), (-5, 3), (100, 100 + 2**20)])
def test_randint_range_and_uniformity(low: int, high: int) -> None:
    _, run = _compile(lambda x: aten.randint.low(low, high, [N]), torch.randn(1))
    torch.manual_seed(0)
    r = run(torch.randn(1))[0]
    assert r.dtype == torch.int64
    assert low <= r.min() and r.max() < high
    n = high - low
    bins = min(n, 16)  # bins of equally many integers
    counts = torch.bincount((r - low) * bins // n, minlength=bins).double()
    assert (counts / N - 1 / bins).abs().max() < 0.01


def test_randint_beyond_float32_range_falls_back() -> None:
    program = trace(lambda x: aten.randint.low(0, MAX_RANDINT_RANGE + 1, [4]), [torch.randn(1)])
    lowered = GraphLowering(program).run()
    assert lowered.fallbacks == {"aten::randint.low": 1}
    assert not any(isinstance(n, ExternCall) and not n.is_fallback for n in lowered.nodes)


def test_native_dropout_mask_and_scale() -> None:
    x = torch.rand(SHAPE) + 0.5  # no zeros
    _, run = _compile(lambda x: aten.native_dropout.default(x, 0.25, True), x)
    torch.manual_seed(0)
    out, mask = run(x)
    assert mask.dtype == torch.bool
    assert abs((~mask).double().mean().item() - 0.25) < 0.01
    torch.testing.assert_close(out, torch.where(mask, x / 0.75, 0.0), rtol=1e-6, atol=0)


def test_dropout_as_aot_emits_it_keeps_scale_and_mask() -> None:
    """``F.dropout(x, p)`` in training becomes ``bernoulli.p(x, 1 - p) / (1 - p) * x``;
    the saved mask (a second output) is the one the forward output used."""
    p = 0.4

    def dropout(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = aten.bernoulli.p(torch.empty_like(x), 1 - p)
        return x * aten.div.Scalar(mask, 1 - p), mask

    x = torch.rand(SHAPE) + 0.5
    compiled, run = _compile(dropout, x)
    assert compiled.metadata["fallbacks"] == {}
    torch.manual_seed(0)
    out, mask = run(x)
    assert abs((mask == 0).double().mean().item() - p) < 0.01
    assert torch.equal(out == 0, mask == 0)
    torch.testing.assert_close(out, x * mask / (1 - p), rtol=1e-6, atol=0)


def test_random_values_recomputed_in_a_reduction_match() -> None:
    """A random value read by a reduction kernel and returned is the same value in
    both (recomputed, not re-read)."""
    def drawn_and_reduced(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r = aten.rand_like(x)
        return r, (r * x).sum(-1)

    x = torch.randn(32, 100)
    _, run = _compile(drawn_and_reduced, x)
    r, s = run(x)
    torch.testing.assert_close(s, (r * x).sum(-1), rtol=1e-5, atol=1e-5)


def test_eager_random_option_matches_eager() -> None:
    x = torch.randn(8, 16)
    compiled, run = _compile(_all_random_ops, x, eager_random=True)
    assert sum(compiled.metadata["fallbacks"].values()) == 9
    torch.manual_seed(5)
    got = run(x)
    torch.manual_seed(5)
    expected = [t for t in _all_random_ops(x)]
    for g, e in zip(got, expected):
        assert torch.equal(g, e)


def test_seed_is_drawn_again_after_a_failed_rule() -> None:
    """A rule that raises after drawing the seed loses its nodes (the seed step too); the
    next random op draws it again."""
    program = trace(lambda x: aten.rand_like(x), [torch.randn(4)])
    lowered = GraphLowering(program)
    first = lowered.rng.seed()
    assert lowered.rng.seed() is first
    del lowered.nodes[:]
    second = lowered.rng.seed()
    assert second.buffer != first.buffer
    assert [n.outputs for n in lowered.nodes if isinstance(n, ExternCall)] == [[second.buffer]]


# -- C++ against Triton (interpreter) against the reference --------------------------------
def _both_backends(fn: Callable[..., Any], x: torch.Tensor, seed: int
                   ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[dict[str, Any]]]:
    pytest.importorskip("triton")
    from ember.inductor.codegen.triton.testing import triton_for_cpu

    program = trace(fn, [x])
    _, run_cpp = compile_and_load(program)
    with triton_for_cpu():
        compiled, run_triton = compile_and_load(program, precompile=False)
    torch.manual_seed(seed)
    cpp = run_cpp(x)
    torch.manual_seed(seed)
    triton = run_triton(x)
    entries = [dict(e, files=compiled.files)
               for g in compiled.metadata["compiled"]["graphs"].values()
               for e in g["kernels"]]
    return cpp, triton, entries


def _random_and_reduced(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    r = aten.rand_like(x)
    return r, aten.randn_like(x), (r * x).sum(-1), aten.bernoulli.p(x, 0.3)


def test_cpp_and_triton_draw_the_same_values() -> None:
    x = torch.randn(37, 101)  # a ragged size: masked tails in both backends
    cpp, triton, _ = _both_backends(_random_and_reduced, x, seed=7)
    key = graph_seed(7)
    assert torch.equal(cpp[0], triton[0])
    assert np.array_equal(cpp[0].flatten().numpy(), reference_rand(key, x.numel()))
    torch.testing.assert_close(cpp[1], triton[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(triton[1].flatten().numpy(), reference_randn(key + 1, x.numel()),
                               rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cpp[2], triton[2], rtol=1e-5, atol=1e-4)
    assert torch.equal(cpp[3], triton[3])


def test_triton_random_kernels_compile_for_sm90() -> None:
    pytest.importorskip("triton")
    from ember.runtime.compiled.triton_aot import compile_for_target
    from ember.runtime.compiled.triton_launcher import spec_from_entry

    _, _, entries = _both_backends(_random_and_reduced, torch.randn(37, 101), seed=0)
    assert entries
    for entry in entries:
        files = entry.pop("files")
        compile_for_target(spec_from_entry(entry, files))
