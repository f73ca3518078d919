"""Matmul templates through the whole inductor, run by Triton's interpreter on CPU
tensors (templates switched on for the CPU's Triton backend): numerics against eager for
mm/addmm/bmm/baddbmm in float32 and bfloat16 with transposed operands, fused prologues
and epilogues, split-K, symbolic M; and the template compiled for sm_90."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.triton.matmul_choice import forced_matmul
from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.inductor.compile import compile_program
from ember.runtime.compiled import load_executor
from ember.runtime.ir import Program, parse_program
from helpers import compile_and_load, trace

pytest.importorskip("triton")

SMALL = "bm32_bn32_bk16_g8_s2_w4"
BF = torch.bfloat16


def _templated(fn: Callable[..., Any], *inputs: torch.Tensor, config: str = SMALL
               ) -> tuple[Program, list[torch.Tensor]]:
    """``fn`` compiled with every matmul a template of ``config``, run on ``inputs``."""
    program = trace(fn, inputs)
    with triton_for_cpu(matmul_templates=True), forced_matmul(config):
        compiled, run = compile_and_load(program, precompile=False)
    return compiled, run(*inputs)


def _sources(compiled: Program) -> str:
    return "\n".join(v.decode() for k, v in compiled.files.items()
                     if k.endswith(".py") and not k.endswith("wrapper.py"))


def _close(out: torch.Tensor, expected: torch.Tensor, bf16: bool = False) -> None:
    """float32: tight; bfloat16 (in the computation): a rounding of the result's scale
    (the interpreter truncates float32 -> bfloat16 where the GPU rounds)."""
    assert out.dtype == expected.dtype and out.shape == expected.shape
    if out.dtype == torch.float32 and not bf16:
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        return
    err = (out.float() - expected.float()).abs().max().item()
    assert err <= 2e-2 * (1 + expected.float().abs().max().item()), err


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.mm(a, b)


def _addmm(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.addmm(c, a, b)


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a, b)


def _baddbmm(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.baddbmm(c, a, b, beta=0.5, alpha=2.0)


def _operands(op: str, dtype: torch.dtype, transposed: str) -> list[torch.Tensor]:
    """Operands of ``op`` (M=40, N=36, K=24; batch 3); ``transposed`` names the operands
    passed as transposed views ("a", "b", "ab" or "")."""
    g = torch.Generator().manual_seed(0)
    lead = (3,) if op in ("bmm", "baddbmm") else ()

    def make(rows: int, cols: int, t: bool) -> torch.Tensor:
        if t:
            return torch.randn((*lead, cols, rows), generator=g).to(dtype).transpose(-1, -2)
        return torch.randn((*lead, rows, cols), generator=g).to(dtype)

    a, b = make(40, 24, "a" in transposed), make(24, 36, "b" in transposed)
    if op in ("addmm", "baddbmm"):
        bias = torch.randn((*lead, 40, 36) if lead else (36,), generator=g).to(dtype)
        return [bias, a, b]
    return [a, b]


FNS: dict[str, Callable[..., torch.Tensor]] = {"mm": _mm, "addmm": _addmm, "bmm": _bmm, "baddbmm": _baddbmm}


@pytest.mark.parametrize(("op", "dtype", "transposed"), [
    ("mm", torch.float32, ""), ("mm", BF, "ab"),
    ("addmm", torch.float32, "b"), ("addmm", BF, ""),
    ("bmm", torch.float32, "a"), ("bmm", BF, "b"),
    ("baddbmm", torch.float32, "ab"), ("baddbmm", BF, ""),
])
def test_template_matches_eager(op: str, dtype: torch.dtype, transposed: str) -> None:
    inputs = _operands(op, dtype, transposed)
    compiled, (out,) = _templated(FNS[op], *inputs)
    assert compiled.metadata["fallbacks"] == {}
    assert f"# matmul template: {op} " in _sources(compiled)
    _close(out, FNS[op](*inputs))


def test_linear_gelu_residual_cast_is_one_kernel_and_matches_eager() -> None:
    def block(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (F.gelu(F.linear(x, w, b), approximate="tanh") + x[..., :36]).float()

    x, w, b = torch.randn(2, 20, 40).to(BF), torch.randn(36, 40).to(BF), torch.randn(36).to(BF)
    compiled, (out,) = _templated(block, x, w, b)
    source = _sources(compiled)
    assert source.count("@triton.jit") == 1  # the 3-d view's epilogue fused too
    assert "libdevice.tanh" in source or "tanh" in source
    _close(out, block(x, w, b), bf16=True)


def test_prologue_cast_and_scale_run_in_the_loads() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x * 0.5).to(BF) @ w.to(BF).t()

    x, w = torch.randn(40, 24), torch.randn(36, 24)
    compiled, (out,) = _templated(fn, x, w)
    source = _sources(compiled)
    assert source.count("@triton.jit") == 1
    prologue_a = source.split("# prologue A")[1].split("# prologue B")[0]
    assert "tl.load(arg0_ptr" in prologue_a and "0.5" in source
    _close(out, fn(x, w), bf16=True)


def test_a_narrow_prologue_feeds_the_dot_rounded() -> None:
    """A bfloat16 op's result read by the dot is a bfloat16 tile (rounded as stored,
    though a fused chain keeps float32 elsewhere: ``BodyBuilder.op_result``)."""
    def fn(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return (q * 0.3) @ k.transpose(-1, -2)

    q, k = torch.randn(2, 40, 24).to(BF), torch.randn(2, 36, 24).to(BF)
    compiled, (out,) = _templated(fn, q, k)
    prologue_a = _sources(compiled).split("# prologue A")[1].split("# prologue B")[0]
    (tile,) = [line for line in prologue_a.splitlines() if "_tile = " in line]
    assert tile.endswith(".to(tl.bfloat16)"), prologue_a
    _close(out, fn(q, k), bf16=True)


def test_dropout_mask_epilogue_fuses_and_draws_the_extern_paths_values() -> None:
    """The random seed's draw goes before the template, so a dropout mask built from
    ``rand_like`` fuses into its epilogue; the same seed gives the extern path's mask."""
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x @ w)
        return y * (torch.rand_like(y) > 0.3) / 0.7

    x, w = torch.randn(40, 24), torch.randn(24, 36)
    outs = []
    for config in (SMALL, "extern"):
        program = trace(fn, [x, w])
        with triton_for_cpu(matmul_templates=True), forced_matmul(config):
            compiled, run = compile_and_load(program, precompile=False)
        torch.manual_seed(0)
        outs.append(run(x, w)[0])
        if config == SMALL:
            source = _sources(compiled)
            assert source.count("# matmul template") == 1 and source.count("def fwd_kernel") == 1
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)
    assert 0.2 < (outs[0] == 0).float().mean().item() < 0.9


def test_tiles_that_divide_the_sizes_need_no_masks() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x @ w.t()) * b

    x, w, b = torch.randn(64, 32), torch.randn(96, 32), torch.randn(96)
    compiled, (out,) = _templated(fn, x, w, b)
    source = _sources(compiled)
    assert "mask" not in source.split("@triton.jit")[1]
    _close(out, fn(x, w, b))


def test_checked_gather_operand_is_stored_not_inlined() -> None:
    """An embedding's bounds check is a store: it cannot run per K step, so the
    gathered operand is computed by a kernel of its own first."""
    def fn(idx: torch.Tensor, table: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(F.embedding(idx, table) @ w)

    inputs = [torch.randint(0, 50, (40,)), torch.randn(50, 24), torch.randn(24, 36)]
    compiled, (out,) = _templated(fn, *inputs)
    source = _sources(compiled)
    assert source.count("def fwd_kernel") == 2 and source.count("# matmul template") == 1
    _close(out, fn(*inputs))


def test_split_k_matches_eager() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w) * 2.0

    x, w = torch.randn(16, 520), torch.randn(520, 20)
    compiled, (out,) = _templated(fn, x, w, config="bm16_bn16_bk32_g8_s2_w4_k4")
    source = _sources(compiled)
    assert "split-K: 4 chunks" in source and "_partial(" in source
    _close(out, fn(x, w))


MLP = '''program dialect=core-functional

graph forward(%x: f32[s0, 32]{32,1} cpu, %w1: f32[32, 64]{64,1} cpu, %b1: f32[64]{1} cpu, %w2: f32[64, 32]{32,1} cpu, %b2: f32[32]{1} cpu):
  symbols s0 in [2, inf] hint=16
  %h: f32[s0, 64]{64,1} cpu = aten::addmm.default(%b1, %x, %w1)
  %g: f32[s0, 64]{64,1} cpu = aten::gelu.default(%h)
  %o: f32[s0, 32]{32,1} cpu = aten::mm.default(%g, %w2)
  %p: f32[s0, 32]{32,1} cpu = aten::add.Tensor(%o, %b2)
  %r: f32[s0, 32]{32,1} cpu = aten::add.Tensor(%p, %x)
  return (%r,)  [user_output]
'''


def test_symbolic_m_runs_at_several_sizes() -> None:
    program = parse_program(MLP)
    program.untrusted_origin = None  # built here, not read from a file
    with triton_for_cpu(matmul_templates=True), forced_matmul("bm16_bn32_bk16_g8_s2_w4"):
        compiled = compile_program(program, {"precompile": False, "strict": True})
    compiled.untrusted_origin = None
    source = _sources(compiled)
    assert source.count("@triton.jit") == 2  # two templates, each with its epilogue
    assert "# matmul template: addmm [M=s0, N=64] reduce [K=64]" not in source
    assert "# matmul template: addmm [M=s0, N=64] reduce [K=32]" in source
    assert "M = s0" in source
    run = load_executor(compiled, "forward")
    g = torch.Generator().manual_seed(1)
    w1, b1 = torch.randn(32, 64, generator=g), torch.randn(64, generator=g)
    w2, b2 = torch.randn(64, 32, generator=g), torch.randn(32, generator=g)
    for rows in (2, 17, 64):
        x = torch.randn(rows, 32, generator=g)
        (out,) = run([x, w1, b1, w2, b2])
        _close(out, F.gelu(torch.addmm(b1, x, w1)) @ w2 + b2 + x)


SYMBOLIC_K = """program dialect=core-functional

graph forward(%x: f32[s0, s1]{s1,1} cpu, %w: f32[s1, 24]{24,1} cpu):
  symbols s0 in [2, inf] hint=16, s1 in [2, inf] hint=40
  %h: f32[s0, 24]{24,1} cpu = aten::mm.default(%x, %w)
  %g: f32[s0, 24]{24,1} cpu = aten::relu.default(%h)
  return (%g,)  [user_output]
"""


def test_symbolic_m_and_k() -> None:
    program = parse_program(SYMBOLIC_K)
    program.untrusted_origin = None
    with triton_for_cpu(matmul_templates=True), forced_matmul("bm16_bn32_bk16_g8_s2_w4"):
        compiled = compile_program(program, {"precompile": False, "strict": True})
    compiled.untrusted_origin = None
    assert "reduce [K=s1]" in _sources(compiled)
    run = load_executor(compiled, "forward")
    for m, k in ((2, 3), (17, 40), (33, 70)):
        x, w = torch.randn(m, k), torch.randn(k, 24)
        (out,) = run([x, w])
        _close(out, torch.relu(x @ w))


@pytest.mark.parametrize("config", [SMALL, "bm64_bn64_bk32_g8_s3_w4_k4"])
@pytest.mark.parametrize("dtype", [torch.float32, BF])
def test_template_compiles_for_sm90(config: str, dtype: torch.dtype) -> None:
    from ember.inductor.codegen.triton.matmul_bench import plain_template_kernel
    from ember.inductor.codegen.triton.matmul_write import write_matmul_template
    from ember.runtime.compiled.triton_aot import compile_for_target
    from ember.runtime.compiled.triton_launcher import spec_from_entry

    a = torch.empty(256, 128, dtype=dtype).t()  # a transposed view: [128, 256]
    b = torch.empty(256, 96, dtype=dtype)
    kernel = plain_template_kernel("mm", a, b, config, allow_tf32=True)
    code = write_matmul_template(kernel)
    spec = spec_from_entry({"name": "k", "lang": "triton", "entry": code.name,
                            "source": "k.py", "meta": code.meta()},
                           {"k.py": code.source.encode()})
    assert ".target sm_90" in compile_for_target(spec).asm["ptx"]
    if code.split is not None:  # split-K: the dot is in the partial function
        spec = dataclasses.replace(spec, name=code.split.name)
    assert "mma" in compile_for_target(spec).asm["ptx"]  # tensor cores (wgmma, mma.sync)
