"""Triton kernels over symbolic sizes, from hand-built loop-IR kernels: the generated
text (sizes are plain integer arguments, never constexprs), the launch grid as a size
expression, the choice of persistent or looped reductions by hint and range, and runs
through Triton's interpreter at several sizes (2, 17, 64, ...) of one generated kernel."""

from __future__ import annotations

from typing import Any

import pytest
import sympy
import torch
from ember.inductor.codegen.triton import generate_triton_kernel
from ember.inductor.codegen.triton.generate import launch_config
from ember.inductor.codegen.triton.kernel_code import TritonKernelCode
from ember.inductor.codegen.triton.sizes import SizeFacts
from ember.inductor.loop_ir import (
    Buffer,
    Compute,
    Kernel,
    Load,
    Reduce,
    Store,
    Sym,
    Var,
    add,
    mul,
)
from ember.runtime.ir import SymbolRange, symbolic

pytest.importorskip("triton")

S0, S1 = symbolic.symbol("s0"), symbolic.symbol("s1")
F32 = torch.float32
UNBOUNDED = SizeFacts({"s0": SymbolRange(2, None, 8), "s1": SymbolRange(2, None, 100)})
BOUNDED = SizeFacts({"s0": SymbolRange(2, 1000, 8), "s1": SymbolRange(2, 256, 100)})


def _pointwise() -> Kernel:
    """``out = abs(a) + b`` over ``a: [s0, 64]`` and a broadcast ``b: [64]``."""
    x0, x1 = Var("x0", S0), Var("x1", 64)
    flat = add(mul(x0, 64), x1)
    return Kernel("k", (x0, x1), (), (
        Load("v0", "a", flat, F32), Load("v1", "b", x1, F32),
        Compute("v2", "abs", ("v0",), F32), Compute("v3", "add", ("v2", "v1"), F32),
        Store("out", flat, "v3"),
    ), (Buffer("a", F32, (S0, 64), (64, 1)), Buffer("b", F32, (64,), (1,)),
        Buffer("out", F32, (S0, 64), (64, 1))))


def _softmax() -> Kernel:
    """Softmax over the rows of ``a: [s0, s1]``."""
    x0, r0 = Var("x0", S0), Var("r0", S1)
    index = add(mul(x0, Sym(S1)), r0)
    return Kernel("k", (x0,), (r0,), (
        Load("v0", "a", index, F32), Reduce("v1", "max", "v0", F32),
        Compute("v2", "sub", ("v0", "v1"), F32), Compute("v3", "exp", ("v2",), F32),
        Reduce("v4", "sum", "v3", F32), Compute("v5", "truediv", ("v3", "v4"), F32),
        Store("out", index, "v5"),
    ), (Buffer("a", F32, (S0, S1), (S1, 1)), Buffer("out", F32, (S0, S1), (S1, 1))))


def _row_sum(rows: int | Any, cols: int | Any) -> Kernel:
    x0, r0 = Var("x0", rows), Var("r0", cols)
    return Kernel("k", (x0,), (r0,), (
        Load("v0", "a", add(mul(x0, Sym(cols) if not isinstance(cols, int) else cols), r0),
             F32),
        Reduce("v1", "sum", "v0", F32), Store("out", x0, "v1"),
    ), (Buffer("a", F32, (rows, cols), (cols, 1)), Buffer("out", F32, (rows,), (1,))))


def _launcher(code: TritonKernelCode) -> Any:
    from ember.runtime.compiled.triton_launcher import load_kernel

    return load_kernel({"name": "k", "lang": "triton", "entry": code.name, "source": "k.py",
                        "meta": code.meta()}, {"k.py": code.source.encode()})


def _body(code: TritonKernelCode) -> str:
    return code.source.split("@triton.jit\n")[-1]


def test_generated_text_of_a_symbolic_pointwise_kernel() -> None:
    code = generate_triton_kernel(_pointwise(), facts=BOUNDED)
    # s0 <= 1000: every index fits 32 bits; the two ranges merge into one flat index
    assert _body(code) == '''def k(a_ptr, b_ptr, out_ptr, s0, XBLOCK: tl.constexpr):
    xnumel = 64*s0
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    x0 = (xindex // 64)
    x1 = xindex % 64
    v0 = tl.load(a_ptr + (64 * x0 + x1), mask=xmask, other=0.0)
    v1 = tl.load(b_ptr + (x1), mask=xmask, other=0.0)
    v2 = tl.abs(v0)
    v3 = (v2 + v1)
    tl.store(out_ptr + (64 * x0 + x1), v3, mask=xmask)
'''
    meta = code.meta()
    assert meta["signature"] == {"a_ptr": "*fp32", "b_ptr": "*fp32", "out_ptr": "*fp32",
                                 "s0": "i64"}
    assert meta["constexprs"] == {"XBLOCK": 512}  # 64*8 at the hint
    assert meta["grid"] == ["(64*s0+511)//512", 1, 1]


def test_generated_text_of_a_symbolic_looped_softmax() -> None:
    code = generate_triton_kernel(_softmax(), facts=UNBOUNDED)
    body = _body(code)
    assert body.startswith('''def k(a_ptr, out_ptr, s0, s1, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    s0 = s0 + tl.full([], 0, tl.int64)
    s1 = s1 + tl.full([], 0, tl.int64)
    xnumel = s0
    rnumel = s1
    xoffset = tl.program_id(0).to(tl.int64) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    rbase = tl.arange(0, RBLOCK)[None, :].to(tl.int64)
''')
    assert body.count("for roffset in range(0, rnumel, RBLOCK):") == 3
    assert "v0 = tl.load(a_ptr + (s1 * x0 + r0), mask=xrmask, other=0.0)" in body
    assert code.constexprs == {"XBLOCK": 8, "RBLOCK": 128} and code.grid == ("(s0+7)//8", 1, 1)


@pytest.mark.parametrize("facts", [UNBOUNDED, BOUNDED], ids=["unbounded", "bounded"])
@pytest.mark.parametrize("s0", [2, 17, 64])
def test_pointwise_kernel_runs_at_every_size(facts: SizeFacts, s0: int) -> None:
    run = _launcher(generate_triton_kernel(_pointwise(), facts=facts))
    a, b = torch.randn(s0, 64), torch.randn(64)
    out = torch.full((s0 + 3, 64), 7.0)  # rows past s0 stay untouched
    run(a, b, out, s0)
    torch.testing.assert_close(out[:s0], a.abs() + b)
    assert (out[s0:] == 7).all()


@pytest.mark.parametrize("facts", [UNBOUNDED, BOUNDED], ids=["unbounded", "bounded"])
@pytest.mark.parametrize("shape", [(2, 2), (17, 33), (64, 64), (3, 250)])
def test_softmax_kernel_runs_at_every_size(facts: SizeFacts, shape: tuple[int, int]) -> None:
    run = _launcher(generate_triton_kernel(_softmax(), facts=facts))
    a = torch.randn(*shape)
    out = torch.empty(*shape)
    run(a, out, *shape)
    torch.testing.assert_close(out, torch.softmax(a, -1))


def test_persistent_only_when_every_row_in_range_fits() -> None:
    def facts(upper: int | None) -> SizeFacts:
        return SizeFacts({"s0": SymbolRange(2, None, 256), "s1": SymbolRange(2, upper, 100)})

    # rows of up to 128: the hint's block holds them all
    assert launch_config(_row_sum(S0, S1), facts(128)).persistent
    config = launch_config(_row_sum(S0, S1), facts(400))  # up to 4x the hint's block
    assert config.persistent and config.rblock == 512
    assert not launch_config(_row_sum(S0, S1), facts(4096)).persistent
    looped = launch_config(_row_sum(S0, S1), facts(None))  # unbounded: loops
    assert not looped.persistent and looped.rblock == 128
    # a static row keeps today's choice, whatever the outer size
    assert launch_config(_row_sum(S0, 64), facts(None)).persistent


@pytest.mark.parametrize("upper", [256, None])
@pytest.mark.parametrize("cols", [2, 17, 64, 256])
def test_row_sum_runs_at_every_size_in_range(upper: int | None, cols: int) -> None:
    facts = SizeFacts({"s0": SymbolRange(2, None, 256), "s1": SymbolRange(2, upper, 100)})
    run = _launcher(generate_triton_kernel(_row_sum(S0, S1), facts=facts))
    a = torch.randn(5, cols)
    out = torch.empty(5)
    run(a, out, 5, cols)
    torch.testing.assert_close(out, a.sum(-1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [2, 17, 70000])
def test_split_reduction_over_a_symbolic_row(n: int) -> None:
    """``x.sum()`` of a long symbolic row splits at its hint; the chunk, the grid and the
    workspaces follow the run-time size."""
    facts = SizeFacts({"s0": SymbolRange(2, None, 70000)})
    code = generate_triton_kernel(_row_sum(1, S0), facts=facts)
    assert code.split is not None and code.split.workspace_numel == 5
    chunk = "(4096*((((s0 + 4) // 5) + 4095) // 4096))"  # 5 chunks of whole blocks
    assert f"rstart = rsplit * {chunk}" in code.source
    assert f"for roffset in range(0, {chunk}, RBLOCK):" in code.source
    assert code.split.grid == (1, 5, 1) and code.grid == (1, 1, 1)
    run = _launcher(code)
    a = torch.randn(1, n)
    out = torch.empty(1)
    run(a, out, n)
    torch.testing.assert_close(out, a.sum(-1), rtol=1e-4, atol=1e-4)


def test_symbolic_kernels_compile_for_sm90() -> None:
    """The real compiler takes the size arguments as i64 scalars (no GPU needed)."""
    from ember.runtime.compiled.triton_aot import compile_for_target
    from ember.runtime.compiled.triton_launcher import spec_from_entry

    for kernel, facts in ((_pointwise(), BOUNDED), (_softmax(), UNBOUNDED)):
        code = generate_triton_kernel(kernel, facts=facts)
        spec = spec_from_entry({"name": "k", "lang": "triton", "entry": code.name,
                                "source": "k.py", "meta": code.meta()},
                               {"k.py": code.source.encode()})
        assert ".target sm_90" in compile_for_target(spec).asm["ptx"]


def test_max_and_min_sizes() -> None:
    """A size with ``Max``/``Min`` (a clamped slice) prints as Triton's builtin max/min."""
    n = sympy.Max(S0, 4) - sympy.Min(S0, 3)
    x0 = Var("x0", n)
    kernel = Kernel("k", (x0,), (), (Load("v0", "a", x0, F32), Store("out", x0, "v0")),
                    (Buffer("a", F32, (n,), (1,)), Buffer("out", F32, (n,), (1,))))
    code = generate_triton_kernel(kernel, facts=BOUNDED)
    assert "    xnumel = max(4, s0) - min(3, s0)\n" in code.source
    run = _launcher(code)
    for s0 in (2, 3, 5):
        numel = max(s0, 4) - min(s0, 3)
        a, out = torch.randn(numel), torch.zeros(numel + 2)
        run(a, out, s0)
        torch.testing.assert_close(out[:numel], a)
        assert (out[numel:] == 0).all()


def test_symbolic_ranges_indexed_as_one_flat_variable_merge() -> None:
    """``x0*s1 + x1`` over ``[s0, s1]`` is one flat index of ``s0*s1`` elements (sympy
    proves the coefficient of x0 is x1's size); a transposed read keeps them apart."""
    from ember.inductor.codegen.triton.ranges import linear_form, merge_dims

    x0, x1 = Var("x0", S0), Var("x1", S1)
    flat = add(mul(x0, Sym(S1)), x1)
    assert linear_form(flat) == ({"x0": S1, "x1": 1}, 0)
    assert [[v.name for v in d.vars] for d in merge_dims([x0, x1], [flat])] == [["x0", "x1"]]
    transposed = add(mul(x1, Sym(S0)), x0)
    assert len(merge_dims([x0, x1], [flat, transposed])) == 2
    kernel = Kernel("k", (x0, x1), (), (Load("v0", "a", flat, F32), Store("out", flat, "v0")),
                    (Buffer("a", F32, (S0, S1), (S1, 1)), Buffer("out", F32, (S0, S1), (S1, 1))))
    code = generate_triton_kernel(kernel, facts=BOUNDED)
    assert "    xnumel = s0*s1\n" in code.source and "    x0 = xindex\n" in code.source
    assert "tl.load(a_ptr + (x0), mask=xmask, other=0.0)" in code.source
    run = _launcher(code)
    for shape in ((2, 2), (17, 3), (5, 64)):
        a, out = torch.randn(*shape), torch.empty(*shape)
        run(a, out, *shape)
        torch.testing.assert_close(out, a)
