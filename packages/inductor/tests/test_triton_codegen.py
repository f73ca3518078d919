"""Triton code generation beyond the op table: looped reductions (rows longer than a
persistent tile), 64-bit indexing, range merging, masks, fusion kernel counts and the
generated text. Kernels run in Triton's interpreter on CPU tensors."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.triton import generate_triton_kernel, kernel_writer
from ember.inductor.codegen.triton.heuristics import choose_config
from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.inductor.loop_ir import Buffer, Kernel, Load, Store, Var, add, mul
from helpers import compile_and_load, trace, triton_specs

pytest.importorskip("triton")


def _compile(fn: Callable[..., Any], *xs: torch.Tensor) -> tuple[Any, list[str], Any]:
    """(compiled program, its Triton sources, runner) for ``fn`` on ``xs``."""
    with triton_for_cpu():
        compiled, run = compile_and_load(trace(fn, xs), precompile=False)
    sources = [v.decode() for k, v in compiled.files.items()
               if k.endswith(".py") and not k.endswith("wrapper.py")]
    return compiled, sources, run


def _check(fn: Callable[..., Any], *xs: torch.Tensor, kernels: int, tol: float = 1e-4
           ) -> list[str]:
    compiled, sources, run = _compile(fn, *xs)
    expected = fn(*[x.clone() for x in xs])
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    actual = run(*[x.clone() for x in xs])
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=tol, atol=tol, equal_nan=True,
                                   check_stride=False)
    assert compiled.metadata["kernels"] == kernels, sources
    return sources


LONG = 5000  # > PERSISTENT_MAX after rounding up: a looped reduction


@pytest.mark.parametrize("name,fn", [
    ("sum", lambda x: x.sum(-1)),
    ("amax", lambda x: x.amax(-1)),
    ("argmax", lambda x: x.argmax(-1)),
    ("argmin", lambda x: x.argmin(-1)),
    ("var", lambda x: x.var(-1)),
    ("prod", lambda x: (x * 0.01 + 1).prod(-1)),
])
def test_looped_reductions_match_eager(name: str, fn: Callable[..., Any]) -> None:
    x = torch.randn(3, LONG)
    x[1, 7] = x[1, 4000] = 50.0  # a tie: argmax must pick the first
    x[2, 9] = x[2, 4001] = -50.0
    sources = _check(fn, x, kernels=1)
    assert "for roffset in range(0, 5000, RBLOCK):" in sources[0]


def test_looped_softmax_and_layer_norm_fuse_into_one_kernel_each() -> None:
    x = torch.randn(2, LONG)
    w, b = torch.randn(LONG), torch.randn(LONG)
    src = _check(lambda x: torch.softmax(x, -1), x, kernels=1)[0]
    assert src.count("for roffset in range") == 3  # max, sum(exp), normalize
    _check(lambda x, w, b: F.layer_norm(x, (LONG,), w, b), x, w, b, kernels=1)


def test_looped_argmax_nan_wins() -> None:
    x = torch.randn(2, LONG)
    x[0, 4321] = float("nan")
    _check(lambda x: (x.argmax(-1), x.amax(-1)), x, kernels=1)


@pytest.mark.parametrize("name,fn,kernels", [
    ("pointwise_chain", lambda x, y: ((x * y).sigmoid() + x).relu() * 2, 1),
    ("softmax_then_layer_norm",
     lambda x, w: F.layer_norm(torch.softmax(x, -1), (64,), w), 1),
    ("rms_norm", lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, 1),
    ("bias_gelu", lambda x, w: F.gelu(x + w), 1),
])
def test_fusion_kernel_counts(name: str, fn: Callable[..., Any], kernels: int) -> None:
    x, w = torch.randn(8, 64), torch.randn(64)
    _check(fn, x, w, kernels=kernels)


def test_persistent_reduction_holds_rows_in_registers() -> None:
    src = _check(lambda x: torch.softmax(x, -1), torch.randn(8, 64), kernels=1)[0]
    assert "for roffset" not in src
    assert "rindex = rbase" in src and "tl.reduce(" in src


def test_contiguous_pointwise_indexes_flat_and_unmasked() -> None:
    src = _check(lambda x, y: x * y + 1, torch.randn(16, 64), torch.randn(16, 64),
                 kernels=1)[0]
    # the two ranges merge into one flat index; 1024 divides 16*64: no mask, no // or %
    assert "tl.load(arg0_ptr + (x0))" in src and "xmask" not in src
    assert "//" not in src.split("def fwd_kernel")[1] and "%" not in src.split("def fwd_kernel")[1]


def test_broadcast_and_transposed_operands() -> None:
    x = torch.randn(6, 10)
    _check(lambda x, b: x.t() * b + x.t().exp(), x, torch.randn(6), kernels=1)


def _copy_kernel(n: int) -> Kernel:
    v = Var("x0", n)
    return Kernel("copy", (v,), (), (Load("v0", "a", v, torch.float32), Store("b", v, "v0")),
                  (Buffer("a", torch.float32, (n,), (1,)), Buffer("b", torch.float32, (n,), (1,))))


def test_int64_indexing_only_when_sizes_need_it() -> None:
    small = generate_triton_kernel(_copy_kernel(1 << 20)).source
    big = generate_triton_kernel(_copy_kernel(3 << 30)).source
    assert "tl.int64" not in small
    assert "xoffset = tl.program_id(0).to(tl.int64) * XBLOCK" in big


def test_int64_path_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel_writer, "INT32_LIMIT", 10)
    x = torch.randn(4, 300)
    sources = _check(lambda x: torch.softmax(x, -1) + 1, x, kernels=1)
    assert ".to(tl.int64)" in sources[0]


def test_block_size_heuristics() -> None:
    pw = choose_config(1 << 20)
    assert (pw.xblock, pw.rblock, pw.num_warps) == (1024, 0, 4)
    assert choose_config(10).xblock == 16
    small_rows = choose_config(4096, 64)
    assert small_rows.persistent and small_rows.rblock == 64 and small_rows.xblock == 16
    wide = choose_config(64, 4096)
    assert wide.persistent and wide.xblock == 1 and wide.num_warps == 4
    assert choose_config(64, 1000).num_warps == 2
    looped = choose_config(64, 5000)
    assert not looped.persistent and looped.xblock == 1 and looped.rblock == 4096


def test_generated_text_of_a_strided_kernel() -> None:
    x0, x1 = Var("x0", 4), Var("x1", 6)
    k = Kernel(
        "k", (x0, x1), (),
        (Load("v0", "a", add(mul(x1, 8), x0), torch.float32),
         Store("out", add(mul(x0, 6), x1), "v0")),
        (Buffer("a", torch.float32, (6, 4), (8, 1)), Buffer("out", torch.float32, (4, 6), (6, 1))),
    )
    body = generate_triton_kernel(k).source.split("@triton.jit\n")[-1]
    assert body == '''def k(a_ptr, out_ptr, XBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)
    xmask = xindex < 24
    x0 = (xindex // 6)
    x1 = xindex % 6
    v0 = tl.load(a_ptr + (x0 + 8 * x1), mask=xmask, other=0.0)
    tl.store(out_ptr + (6 * x0 + x1), v0, mask=xmask)
'''


def test_reduction_over_the_outer_dim_uses_column_tiles() -> None:
    x = torch.randn(300, 48)
    src = _check(lambda x: (x.sum(0), x.amax(0)), x, kernels=1)[0]
    assert "XBLOCK" in src and "for roffset in range(0, 300, RBLOCK):" in src
    from ember.inductor.codegen.triton.kernel_writer import reduces_columns

    r0, x0 = Var("r0", 300), Var("x0", 48)
    k = Kernel("k", (x0,), (r0,), (Load("v0", "a", add(mul(r0, 48), x0), torch.float32),),
               (Buffer("a", torch.float32, (300, 48), (48, 1)),))
    assert reduces_columns(k)
    assert choose_config(48, 300, columns=True).xblock == 32


@pytest.mark.parametrize("name,fn,shape", [
    ("sum_all", lambda x: x.sum(), (70000,)),
    ("mean_rows", lambda x: x.mean(-1), (3, 70000)),
    ("amax_all", lambda x: x.amax(), (70000,)),
    ("any_all", lambda x: (x > 3.5).any(), (70000,)),
    ("norm_epilogue", lambda x: x.pow(2).sum().sqrt() + 1, (70000,)),
])
def test_split_reductions_match_eager(name: str, fn: Callable[..., Any], shape: tuple[int, ...]
                                      ) -> None:
    x = torch.randn(*shape)
    src = _check(fn, x, kernels=1, tol=1e-3)[0]
    assert "_partial(" in src and "rsplit = tl.program_id(1)" in src


def test_split_reduction_config() -> None:
    assert choose_config(1, 70000).split == 5
    assert choose_config(1, 1 << 26).split == 256
    assert choose_config(4096, 70000).split == 1  # enough rows already
    assert choose_config(1, 5000).split == 1  # too short to pay for a second kernel


def test_codegen_variants_compile_for_sm90(monkeypatch: pytest.MonkeyPatch) -> None:
    """Looped, split and column reductions and 64-bit indexing also pass the real
    compiler (for sm_90, no GPU needed), not only the interpreter."""
    from ember.runtime.compiled.triton_aot import compile_for_target

    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.softmax(x, -1), x.argmax(-1), y.sum(), y.view(50, 1400).sum(0)

    monkeypatch.setattr(kernel_writer, "INT32_LIMIT", 100_000)
    compiled, _, _ = _compile(fn, torch.randn(2, LONG), torch.randn(70000))
    specs = triton_specs(compiled)
    sources = "\n".join(s.source for s in specs)
    assert "_partial" in sources and "tl.int64" in sources and "for roffset" in sources
    for spec in specs:
        result = compile_for_target(spec)
        assert ".target sm_90" in result.asm["ptx"]


def test_split_column_reduction_matches_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.inductor.codegen.triton import heuristics

    assert choose_config(4096, 32768, columns=True).split == 8
    monkeypatch.setattr(heuristics, "COLUMN_TARGET_PROGRAMS", 8)
    x = torch.randn(4096, 40)
    src = _check(lambda x: (x.sum(0), x.amin(0)), x, kernels=1, tol=1e-3)[0]
    assert "_partial(" in src


def test_a_column_reduction_over_a_checked_gather_still_splits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An embedding recomputed inside a column reduction (GPT-2's first layer norm's
    weight gradient in the backward) checks its indexes inside the reduction loop: the
    check's stores run in the partial kernel, so the reduction still splits (unsplit: 2
    programs, 440 us on the H200) and a bad index still raises."""
    from ember.inductor.codegen.triton import heuristics

    monkeypatch.setattr(heuristics, "COLUMN_TARGET_PROGRAMS", 8)

    def fn(ids: torch.Tensor, w: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return (F.embedding(ids, w) * g).sum(0)

    ids, w, g = torch.randint(0, 50, (4096,)), torch.randn(50, 40), torch.randn(4096, 40)
    _, sources, run = _compile(fn, ids, w, g)
    (src,) = sources
    assert "_partial(" in src and "kernel_errors" in src.split("def fwd_kernel0(")[0]
    torch.testing.assert_close(run(ids, w, g)[0], fn(ids, w, g), rtol=1e-3, atol=1e-3)
    bad = ids.clone()
    bad[3000] = 50
    with pytest.raises(IndexError, match="index 50 is out of bounds"):
        run(bad, w, g)


def test_merge_dims_groups_ranges_indexed_as_one_flat_variable() -> None:
    from ember.inductor.codegen.triton.ranges import linear_form, merge_dims
    from ember.inductor.loop_ir import floordiv

    a, b, c = Var("a", 4), Var("b", 6), Var("c", 8)
    contiguous = add(mul(a, 48), mul(b, 8), c)
    assert linear_form(contiguous) == ({"a": 48, "b": 8, "c": 1}, 0)
    assert [len(d.vars) for d in merge_dims([a, b, c], [contiguous])] == [3]
    # a broadcast operand indexed by c alone keeps (a, b) merged but c apart
    assert [[v.name for v in d.vars] for d in merge_dims([a, b, c], [contiguous, c])] == [
        ["a", "b"], ["c"]]
    # a transposed read of (b, c) splits every pair
    transposed = add(mul(a, 48), mul(c, 6), b)
    assert len(merge_dims([a, b, c], [contiguous, transposed])) == 3
    # a variable under // cannot merge
    assert linear_form(floordiv(contiguous, 3)) is None
    assert len(merge_dims([a, b, c], [contiguous, floordiv(add(mul(b, 8), c), 3)])) == 3


@pytest.mark.parametrize("op,dtype,expected", [
    ("sum", torch.float32, [1.5, -2.0]), ("argmax", torch.int64, [0, 0]),
    ("any", torch.bool, [True, True]), ("max", torch.float32, [1.5, -2.0]),
])
def test_reduce_without_reduction_ranges_is_the_element(op: str, dtype: torch.dtype,
                                                        expected: list[Any]) -> None:
    from ember.inductor.loop_ir import Reduce
    from ember.runtime.compiled.triton_launcher import load_kernel

    x0 = Var("x0", 2)
    k = Kernel("k", (x0,), (), (Load("v0", "a", x0, torch.float32),
                                Reduce("v1", op, "v0", dtype), Store("out", x0, "v1")),
               (Buffer("a", torch.float32, (2,), (1,)), Buffer("out", dtype, (2,), (1,))))
    code = generate_triton_kernel(k)
    fn = load_kernel({"name": "k", "lang": "triton", "entry": code.name, "source": "k.py",
                      "meta": code.meta()},
                     {"k.py": code.source.encode()})
    out = torch.empty(2, dtype=dtype)
    fn(torch.tensor([1.5, -2.0]), out)
    assert out.tolist() == expected


def test_few_long_rows_stay_split_reductions() -> None:
    """Batch-norm statistics over N*H*W for 64 channels (channels-last) and a softmax
    over one long row: for Triton every kernel stays a one-pass split reduction (the
    variance after its mean, the softmax passes: kernels of their own; the copy of the
    input is stored by the statistics' partial programs), and the results still match
    eager through the interpreter."""
    from ember.inductor.codegen.triton.split_writer import splittable, wants_split
    from ember.inductor.lowering.graph_lowering import GraphLowering
    from ember.inductor.scheduler import KernelStep, schedule

    def fn(x: torch.Tensor) -> list[torch.Tensor]:
        y = x * 2
        v, m = torch.var_mean(y, [0, 2, 3], correction=0)
        return [v, m, (y - m[:, None, None]).relu(), torch.softmax(x.reshape(-1), 0)]

    x = torch.randn(4, 64, 32, 32).contiguous(memory_format=torch.channels_last)
    program = trace(fn, [x])
    with triton_for_cpu():
        steps = schedule(GraphLowering(program).run())
        kernels = [s.kernel for s in steps if isinstance(s, KernelStep)]
        split = [k for k in kernels if wants_split(k)]
        assert len(split) == 4 and all(splittable(k) for k in split)
        _, run = compile_and_load(program)
        for a, e in zip(run(x), fn(x)):
            torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5)
