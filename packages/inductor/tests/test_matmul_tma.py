"""The persistent TMA matmul variant (Hopper) on CPU: its generated source (printed
form), runs through Triton's interpreter (numerics against eager, a persistent launch of
fewer programs than tiles, symbolic M), its sm_90 compile (TMA copies and wgmma in the
PTX), the fallback to the pointer template where a kernel does not suit it, and the
choice table (which rule keeps the variant out, and the log line that says so)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.triton.matmul_choice import (
    forced_matmul,
)
from ember.inductor.codegen.triton.matmul_configs import TMA_CONFIGS
from ember.inductor.codegen.triton.matmul_tma import HOPPER, assume_capability
from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.inductor.compile import compile_program
from ember.runtime.compiled import load_executor
from ember.runtime.config import patch
from ember.runtime.ir import Program, parse_program
from helpers import compile_and_load, trace

triton = pytest.importorskip("triton")

BF = torch.bfloat16
TMA_SMALL = "tma_bm32_bn32_bk16_g8_s3_w4"


def _interpreter_has_descriptors() -> bool:
    from triton.runtime import interpreter

    return hasattr(interpreter.InterpreterBuilder, "create_make_tensor_descriptor")


needs_descriptors = pytest.mark.skipif(
    not _interpreter_has_descriptors(),
    reason="this Triton's interpreter has no tensor descriptors")


@pytest.fixture(autouse=True)
def hopper() -> Iterator[None]:
    """Every test sees an sm_90 device of 2 SMs (a persistent launch of 2 programs)."""
    with assume_capability(HOPPER, sms=2):
        yield


def _compiled(fn: Callable[..., Any], inputs: Sequence[torch.Tensor], config: str
              ) -> tuple[Program, Callable[..., list[Any]]]:
    program = trace(fn, inputs)
    with triton_for_cpu(matmul_templates=True), forced_matmul(config):
        compiled, run = compile_and_load(program, precompile=False)
    return compiled, run


def _kernels(compiled: Program) -> str:
    return "\n".join(v.decode() for k, v in compiled.files.items()
                     if k.endswith(".py") and not k.endswith("wrapper.py"))


def _function(source: str) -> str:
    """The text of the module's (first) jitted function."""
    return "@triton.jit" + source.split("@triton.jit", 1)[1]


def _close(out: torch.Tensor, expected: torch.Tensor) -> None:
    """bfloat16: a rounding of the result's scale (the interpreter truncates)."""
    assert out.dtype == expected.dtype and out.shape == expected.shape
    err = (out.float() - expected.float()).abs().max().item()
    assert err <= 2e-2 * (1 + expected.float().abs().max().item()), err


def _linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.linear(x, w, b))


def _linear_inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(64, 32, generator=g).to(BF), torch.randn(48, 32, generator=g).to(BF),
            torch.randn(48, generator=g).to(BF)]


LINEAR_GELU = '''
@triton.jit
def fwd_kernel0(arg0_ptr, arg1_ptr, arg2_ptr, buf1_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # matmul template: addmm [M=64, N=48] reduce [K=32], tma_bm32_bn32_bk16_g8_s3_w4 (TMA, persistent)
    # fused: addmm, gelu
    M = 64
    N = 48
    K = 32
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    tiles = grid_m * grid_n
    a_desc = tl.make_tensor_descriptor(arg0_ptr, shape=[M, K], strides=[32, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(arg1_ptr, shape=[N, K], strides=[32, 1], block_shape=[BLOCK_N, BLOCK_K])
    v11 = tl.full([], 0.5, tl.float32)
    v13 = tl.full([], 0.7071067811865475, tl.float32)
    v16 = tl.full([], 1.0, tl.float32)
    tile_c = tl.program_id(0) - tl.num_programs(0)
    for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        first_m = (tile // width) * GROUP_M
        rows = tl.minimum(grid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % width) % rows
        pid_n = (tile % width) // rows
        acc = tl.full([BLOCK_M, BLOCK_N], 0, tl.float32)
        for koff in range(0, K, BLOCK_K):
            v0 = a_desc.load([tl.cast(pid_m * BLOCK_M, tl.int32), tl.cast(koff, tl.int32)])
            v2 = tl.trans(b_desc.load([tl.cast(pid_n * BLOCK_N, tl.int32), tl.cast(koff, tl.int32)]))
            if DOT_IN_FLOAT32:
                acc = tl.dot(v0.to(tl.float32), v2.to(tl.float32), acc, input_precision="ieee")
            else:
                acc = tl.dot(v0, v2, acc)
        tile_c += tl.num_programs(0)
        first_m = (tile_c // width) * GROUP_M
        rows = tl.minimum(grid_m - first_m, GROUP_M)
        pid_m = first_m + (tile_c % width) % rows
        pid_n = (tile_c % width) // rows
        xm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M))[:, None]
        xn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N))[None, :]
        xmask = (xn < N)
        # epilogue [BLOCK_M, BLOCK_N]
        v5 = acc
        v6 = tl.load(arg2_ptr + (xn), mask=xmask, other=0.0)
        v7 = v6.to(tl.float32)
        v8 = (v5 + v7)
        v9 = v8.to(tl.bfloat16)
        v10 = v9.to(tl.float32)
        v12 = (v10 * v11)
        v14 = (v10 * v13)
        v15 = tl.erf(v14)
        v17 = (v16 + v15)
        v18 = (v12 * v17)
        v19 = v18.to(tl.bfloat16)
        tl.store(buf1_ptr + ((xm*48 + xn)), v19, mask=xmask)
'''


def test_tma_source_of_a_linear_with_bias_and_gelu() -> None:
    """Descriptors over the operands as they lie (the weight row-major [N, K], its tile
    transposed for the dot), the persistent tile loop, the pointer template's fused
    epilogue inside it; the module sets no allocator (the runtime's launcher does, in
    each thread: ``triton_scratch``)."""
    compiled, _ = _compiled(_linear_gelu, _linear_inputs(), TMA_SMALL)
    source = _kernels(compiled)
    assert _function(source).strip() == LINEAR_GELU.strip()
    assert "set_allocator" not in source  # the runtime's launcher installs it


@needs_descriptors
def test_tma_template_matches_eager_in_the_interpreter() -> None:
    """2 programs over 4 output tiles: each program runs two tiles of the loop."""
    inputs = _linear_inputs()
    _, run = _compiled(_linear_gelu, inputs, TMA_SMALL)
    (out,) = run(*inputs)
    _close(out, _linear_gelu(*inputs))


@needs_descriptors
@pytest.mark.parametrize("transposed", ["", "a", "b", "ab"])
def test_operand_layouts_match_eager(transposed: str) -> None:
    """Row-major and transposed-view operands, and sizes no tile divides (TMA's
    out-of-bounds tiles read zero: M=40, N=56, K=24)."""
    g = torch.Generator().manual_seed(1)

    def make(rows: int, cols: int, t: bool) -> torch.Tensor:
        if t:
            return torch.randn(cols, rows, generator=g).to(BF).t()
        return torch.randn(rows, cols, generator=g).to(BF)

    a, b = make(40, 24, "a" in transposed), make(24, 56, "b" in transposed)

    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a @ b)

    compiled, run = _compiled(fn, [a, b], TMA_SMALL)
    source = _kernels(compiled)
    assert "make_tensor_descriptor" in source
    assert ("tl.trans(a_desc" in source) == ("a" in transposed)
    assert ("tl.trans(b_desc" in source) == ("b" in transposed)
    (out,) = run(a, b)
    _close(out, fn(a, b))


def test_launch_is_persistent() -> None:
    """The grid is min(SMs, tiles): a size expression under symbolic M."""
    from ember.inductor.codegen.triton.matmul_bench import plain_template_kernel
    from ember.inductor.codegen.triton.matmul_write import write_matmul_template

    a, b = torch.empty(256, 64, dtype=BF), torch.empty(64, 96, dtype=BF)
    code = write_matmul_template(plain_template_kernel("mm", a, b, TMA_SMALL))
    assert code.meta()["grid"] == [2, 1, 1]  # 8 x 3 tiles, 2 SMs
    with assume_capability(HOPPER, sms=132):
        code = write_matmul_template(plain_template_kernel("mm", a, b, TMA_SMALL))
    assert code.meta()["grid"] == [24, 1, 1]


SYMBOLIC_MLP = """program dialect=core-functional

graph forward(%x: bf16[s0, 32]{32,1} cpu, %w1: bf16[64, 32]{32,1} cpu, %b1: bf16[64]{1} cpu, %w2: bf16[32, 64]{64,1} cpu):
  symbols s0 in [2, inf] hint=64
  %t1: bf16[32, 64]{1,32} cpu = aten::t.default(%w1)
  %h: bf16[s0, 64]{64,1} cpu = aten::addmm.default(%b1, %x, %t1)
  %g: bf16[s0, 64]{64,1} cpu = aten::gelu.default(%h)
  %t2: bf16[64, 32]{1,64} cpu = aten::t.default(%w2)
  %y: bf16[s0, 32]{32,1} cpu = aten::mm.default(%g, %t2)
  %r: bf16[s0, 32]{32,1} cpu = aten::add.Tensor(%y, %x)
  return (%r,)  [user_output]
"""


def _symbolic_mlp(config: str = TMA_SMALL) -> Program:
    program = parse_program(SYMBOLIC_MLP)
    program.untrusted_origin = None  # built here, not read from a file
    with triton_for_cpu(matmul_templates=True), forced_matmul(config):
        compiled = compile_program(program, {"precompile": False, "strict": True})
    compiled.untrusted_origin = None
    return compiled


@needs_descriptors
def test_symbolic_m_runs_at_several_sizes() -> None:
    """The descriptors take M at run time; the grid follows it."""
    compiled = _symbolic_mlp()
    source = _kernels(compiled)
    assert source.count("make_tensor_descriptor(") == 4  # two templates, two operands
    assert "M = s0" in source and "shape=[M, K]" in source
    run = load_executor(compiled, "forward")
    g = torch.Generator().manual_seed(2)
    w1, b1 = torch.randn(64, 32, generator=g).to(BF), torch.randn(64, generator=g).to(BF)
    w2 = torch.randn(32, 64, generator=g).to(BF)
    for rows in (2, 17, 100):
        x = torch.randn(rows, 32, generator=g).to(BF)
        (out,) = run([x, w1, b1, w2])
        expected = F.linear(F.gelu(F.linear(x, w1, b1)), w2) + x
        _close(out, expected)


def _aot(fn: Callable[..., Any], inputs: Sequence[torch.Tensor], config: str) -> list[str]:
    """The PTX of each Triton kernel of ``fn`` compiled for sm_90."""
    compiled, _ = _compiled(fn, inputs, config)
    return _aot_program(compiled)


def _aot_program(compiled: Program) -> list[str]:
    from ember.runtime.compiled.triton_aot import compile_for_target
    from ember.runtime.compiled.triton_launcher import spec_from_entry

    graphs: Any = compiled.metadata["compiled"]["graphs"]  # type: ignore[index]
    entries = graphs["forward"]["kernels"]
    return [compile_for_target(spec_from_entry(e, compiled.files)).asm["ptx"]
            for e in entries]


def test_bf16_linear_bias_gelu_compiles_for_sm90() -> None:
    """The table's first config: TMA copies (cp.async.bulk.tensor), descriptors built on
    the device (tensormap), Hopper's wgmma."""
    g = torch.Generator().manual_seed(3)
    inputs = [torch.randn(512, 768, generator=g).to(BF),
              torch.randn(3072, 768, generator=g).to(BF), torch.randn(3072).to(BF)]
    config = TMA_CONFIGS[("16-bit", "large")][0].name
    (ptx,) = _aot(_linear_gelu, inputs, config)
    assert ".target sm_90" in ptx
    assert "cp.async.bulk.tensor" in ptx and "tensormap" in ptx and "wgmma" in ptx


def test_symbolic_m_compiles_for_sm90() -> None:
    for ptx in _aot_program(_symbolic_mlp(TMA_CONFIGS[("16-bit", "large")][0].name)):
        assert "cp.async.bulk.tensor" in ptx and "wgmma" in ptx


def _mlp(x: torch.Tensor, lw: torch.Tensor, lb: torch.Tensor, w1: torch.Tensor,
         b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
    h = F.layer_norm(x, (x.shape[-1],), lw, lb)
    return x + F.linear(F.gelu(F.linear(h, w1, b1)), w2, b2)


@needs_descriptors
def test_mlp_block_takes_the_variant_for_both_matmuls(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The GELU between the matmuls is stored by the first's epilogue, not fused into
    the second's loads, so both read their operands through descriptors."""
    g = torch.Generator().manual_seed(4)
    d = 32
    xs = [torch.randn(96, d, generator=g).to(BF), torch.randn(d, generator=g).to(BF),
          torch.randn(d, generator=g).to(BF), (torch.randn(4 * d, d, generator=g) / 8).to(BF),
          torch.randn(4 * d, generator=g).to(BF),
          (torch.randn(d, 4 * d, generator=g) / 16).to(BF), torch.randn(d, generator=g).to(BF)]
    with patch(logs="autotune"):
        compiled, run = _compiled(_mlp, xs, TMA_SMALL)
    assert "TMA variant not used" not in capsys.readouterr().err  # no writer fallback
    assert _kernels(compiled).count("make_tensor_descriptor(") == 4
    (out,) = run(*xs)
    _close(out, _mlp(*xs))
