"""The wrapper's memory plan (issue #19 item 5, ``codegen/memory_plan.py``): pointwise
kernels write in place of a dead input, dead buffers are freed where they die unless a
later buffer takes their memory without raising the peak, and ``EMBER_LOGS=memory``
prints the live bytes step by step (the peak also lands in ``metadata["memory"]``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from ember.inductor.codegen.memory_plan import OUT_VARIANT_OPS, format_bytes, same_index
from ember.inductor.codegen.wrapper import OUT_VARIANTS
from ember.inductor.loop_ir.index import Int, Var, add, floordiv, mod, mul
from ember.runtime.config import patch

sys.path.insert(0, str(Path(__file__).parent))

from helpers import compile_and_load, compile_fn, compile_for, trace

_W1, _W2 = torch.randn(16, 16), torch.randn(16, 16)


def _mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return ((x @ w1).relu() @ w2).sin()


def _wrapper(compiled: object) -> str:
    return compiled.files["forward/wrapper.py"].decode()  # type: ignore[attr-defined, no-any-return]


def test_memory_log_prints_the_live_bytes_of_each_step(
        capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(8, 16)
    with patch(logs=frozenset({"memory"})):
        compiled, _ = compile_and_load(trace(_mlp, [x, _W1, _W2]))
    err = capsys.readouterr().err
    assert err == (
        "[ember.memory] memory of graph 'forward' (cpu): peak 1.0 KiB at step 2, ideal "
        "1.0 KiB (bytes at the size hints; inputs and constants not counted)\n"
        "  step  what                     allocated  freed     live\n"
        "     0  extern aten::mm.default      512 B      0    512 B\n"
        "     1  kernel0 (buf1 in buf0)           0      0    512 B\n"
        "     2  extern aten::mm.default      512 B  512 B  1.0 KiB\n"
        "     3  kernel1 (buf3 in buf2)           0      0    512 B\n")
    assert compiled.metadata["memory"] == {
        "forward": {"peak_bytes": 1024, "ideal_bytes": 1024}}


def test_a_backward_graph_reports_the_saved_values_it_frees(
        capsys: pytest.CaptureFixture[str]) -> None:
    import ember.frontend as ef

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    with patch(logs=frozenset({"memory"}), program_cache=False, capture_cache=False):
        ef.compile(model)(torch.randn(8, 16)).sum().backward()
    err = capsys.readouterr().err
    forward, backward = err.split("[ember.memory] memory of graph 'backward'")
    assert "released after their last read" not in forward
    # the input, the weights the backward reads, the tanh's output (a parameter stays
    # alive: the module holds it)
    assert ("\n  4 saved values (2.1 KiB) released after their last read (an activation's "
            "memory is freed there)\n") in backward, backward


def test_nothing_is_logged_without_the_topic(capsys: pytest.CaptureFixture[str]) -> None:
    with patch(logs=frozenset()):
        compile_and_load(trace(_mlp, [torch.randn(8, 16), _W1, _W2]))
    assert "ember.memory" not in capsys.readouterr().err


def test_pointwise_kernels_write_in_place_of_their_dead_input(backend: str) -> None:
    # before: buf1 and buf3 were fresh allocations while buf0 and buf2 sat in the pool
    x = torch.randn(8, 16)
    compiled, run = compile_for(_mlp, x, _W1, _W2, backend=backend)
    wrapper = _wrapper(compiled)
    assert "buf1 = buf0; del buf0  # written in place of buf0's memory" in wrapper
    assert "buf3 = buf2; del buf2  # written in place of buf2's memory" in wrapper
    assert " = _empty(" not in wrapper
    torch.testing.assert_close(run(x, _W1, _W2)[0], _mlp(x, _W1, _W2))


def test_a_kernel_reading_its_input_at_another_index_is_not_in_place(backend: str) -> None:
    def flipped(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w).flip(0) * 2  # out[i] reads m[7 - i]: m[7 - i] is written later

    x = torch.randn(8, 16)
    compiled, run = compile_for(flipped, x, _W1, backend=backend)
    wrapper = _wrapper(compiled)
    assert "in place" not in wrapper
    assert "buf1 = _empty((8, 16), (16, 1)" in wrapper
    torch.testing.assert_close(run(x, _W1)[0], flipped(x, _W1))


def test_a_one_pass_reduction_stores_in_place_of_its_dead_input(backend: str) -> None:
    """``d = tanh(m)`` stored while its row sums are taken, in one pass over ``m``: ``d``
    takes ``m``'s memory (a GELU's gradient over the incoming gradient while the bias
    gradient sums it: 384 MiB of the zoo mlp's bf16 training peak on a GPU)."""
    def tanh_and_sums(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d = torch.tanh(x @ w)
        return d, d.sum(1)

    x = torch.randn(8, 16)
    compiled, run = compile_for(tanh_and_sums, x, _W1, backend=backend)
    wrapper = _wrapper(compiled)
    assert "buf2 = buf0; del buf0  # written in place of buf0's memory" in wrapper, wrapper
    got = run(x, _W1)
    for g, w in zip(got, tanh_and_sums(x, _W1), strict=True):
        torch.testing.assert_close(g, w)


def test_a_reduction_storing_after_a_second_pass_is_not_in_place(backend: str) -> None:
    """A softmax stores in its last pass over the row, after passes that read it: a
    looped kernel would load an element again after another element's store, so its
    output does not take its input's memory."""
    def softmax(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x @ w, 1)

    x = torch.randn(8, 16)
    compiled, run = compile_for(softmax, x, _W1, backend=backend)
    assert "in place" not in _wrapper(compiled)
    torch.testing.assert_close(run(x, _W1)[0], softmax(x, _W1))


_WB, _WBACK = torch.randn(16, 256), torch.randn(256, 16)


def _wide(x: torch.Tensor) -> torch.Tensor:
    b = (x @ _W1).flip(0) * 2
    d = (b @ _WB).flip(0) * 3
    return d @ _WBACK


def test_a_dead_buffer_nobody_takes_is_freed_where_it_dies() -> None:
    # buf0 and buf1 (512 B) die before the 16 KiB kernel1; buf1's memory goes to the last
    # matmul's result through out= (on the CPU every reuse is taken: a fresh allocation
    # costs page faults), buf0's to nobody: freed after kernel0 (before: held in the
    # reuse pool to the end of the graph). On a GPU, where holding buf1 through kernel1
    # raises the peak, it is freed too (tools/tests/test_bench_static_memory.py).
    x = torch.randn(8, 16)
    compiled, run = compile_fn(_wide, x)
    wrapper = _wrapper(compiled)
    assert "    kernel0(buf0, buf1)\n    del buf0\n" in wrapper
    assert "buf4 = buf1; del buf1  # reuse buf1's memory" in wrapper
    assert "torch.mm(buf3, const2, out=buf4)" in wrapper
    assert compiled.metadata["memory"]["forward"]["peak_bytes"] == 16 * 1024 + 512
    torch.testing.assert_close(run(x)[0], _wide(x))


def test_a_dead_buffer_of_the_same_bytes_but_another_shape_is_reused() -> None:
    # the cat's [4, 32] result takes the memory of buf1 [8, 16] (same dtype and bytes,
    # dead since the matmul before it), viewed in its layout (before: the pool matched
    # exact layouts only); the [32, 4] ones that of buf2, dead since the cat
    def f(x: torch.Tensor) -> torch.Tensor:
        b = (x @ _W1).flip(0) * 2
        c = b @ _W2
        return torch.cat([c[:4], c[4:]], 1) @ torch.ones(32, 4)

    x = torch.randn(8, 16)
    compiled, run = compile_fn(f, x)
    wrapper = _wrapper(compiled)
    # viewed without autograd's view record: memory no one else sees
    assert "buf3 = _read_view(buf1, (4, 32), (32, 1), 0); del buf1  # reuse buf1's memory" \
        in wrapper
    assert "buf4 = _read_view(buf2, (32, 4), (4, 1), 0); del buf2  # reuse buf2's memory" \
        in wrapper
    torch.testing.assert_close(run(x)[0], f(x))


def test_in_place_through_a_view_of_the_same_elements(backend: str) -> None:
    # a 3-d linear's result read through its [2, 8, 16] view: the GELU loads
    # buf0[(x0 // 8)*128 + (x0 % 8)*16 + x1] and stores buf1[x0*16 + x1], the same offsets
    w = _W1

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x @ w) @ w

    x = torch.randn(2, 8, 16)
    compiled, run = compile_for(f, x, backend=backend)
    wrapper = _wrapper(compiled)
    assert "buf1 = buf0; del buf0  # written in place of buf0's memory" in wrapper
    torch.testing.assert_close(run(x)[0], f(x))


def test_same_index_compares_offsets_not_spellings() -> None:
    x0, x1 = Var("x0", 16), Var("x1", 16)
    store = add(mul(x0, 16), x1)
    view = add(mul(floordiv(x0, 8), 128), mul(mod(x0, 8), 16), x1)
    assert view == store and same_index(view, store)  # the builders fold the split
    assert same_index(add(x1, mul(x0, 16)), store)  # terms in another order
    assert not same_index(add(mul(floordiv(x0, 8), 128), mul(mod(x0, 8), 8), x1), store)
    assert not same_index(add(mul(add(Int(15), mul(x0, -1)), 16), x1), store)  # flipped
    assert not same_index(add(mul(x0, 16), x1, Int(1)), store)  # shifted
    assert not same_index(mod(add(mul(x0, 16), x1), 128), store)  # two variables a term


def test_out_variants_are_the_plans_out_variant_ops() -> None:
    assert set(OUT_VARIANTS) == OUT_VARIANT_OPS


def test_format_bytes() -> None:
    assert [format_bytes(n) for n in (0, 512, 1536, 3 << 20, 5 << 30)] == [
        "0", "512 B", "1.5 KiB", "3.00 MiB", "5.00 GiB"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_peak_is_the_planned_peak(dtype: torch.dtype) -> None:
    # a Linear-GELU-Linear + residual block on the GPU (the GELU and the add in place of
    # the matmul results, or fused into matmul templates): right, and the allocator's
    # measured peak of one call is the plan's (within rounding)
    g = torch.Generator().manual_seed(0)
    x, w1, w2 = (torch.randn(*s, generator=g).to(dtype).cuda() * 0.1
                 for s in ((2048, 1024), (1024, 4096), (4096, 1024)))

    def block(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x @ w1) @ w2 + x

    compiled, run = compile_and_load(trace(block, [x, w1, w2]), precompile=False)
    torch.testing.assert_close(run(x, w1, w2)[0], block(x, w1, w2), atol=2e-2, rtol=2e-2)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = run(x, w1, w2)[0]
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated() - before
    planned = compiled.metadata["memory"]["forward"]["peak_bytes"]
    print(f"{dtype}: measured {measured / 2**20:.1f} MiB, planned {planned / 2**20:.1f} MiB")
    assert out.shape == (2048, 1024)
    assert measured <= planned * 1.05 + (2 << 20)
