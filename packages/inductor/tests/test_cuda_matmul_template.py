"""Matmul templates on a CUDA GPU at realistic shapes: numerics against eager (float16,
bfloat16, float32 with and without TF32; transposed weights; fused epilogues and
prologues; split-K; batched; symbolic M), that the generated code holds the template
(and the default heuristic's choices), and the plain template against cuBLAS. Skipped
without CUDA; run on the H200 (``pytest -m cuda packages/inductor/tests/test_cuda_matmul_template.py``)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.triton.matmul_choice import forced_matmul
from ember.runtime.ir import Program
from helpers import compile_and_load, trace

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]


def _sources(compiled: Program) -> str:
    return "\n".join(v.decode() for k, v in compiled.files.items()
                     if k.endswith(".py") and not k.endswith("wrapper.py"))


def _run(fn: Callable[..., Any], xs: list[torch.Tensor], forced: str | None = "template"
         ) -> tuple[str, list[torch.Tensor]]:
    program = trace(fn, xs)
    if forced is None:
        compiled, run = compile_and_load(program)
    else:
        with forced_matmul(forced):
            compiled, run = compile_and_load(program)
    return _sources(compiled), run(*xs)


def _check(out: torch.Tensor, expected: torch.Tensor, k: int,
           rounded: torch.dtype | None = None) -> None:
    """Within the accumulation error of a K-long float32 dot plus one rounding to
    ``rounded`` (default: the result's dtype)."""
    scale = expected.float().abs().max().item() + 1
    eps = {torch.float32: 1e-5, torch.bfloat16: 1e-2,
           torch.float16: 2e-3}[rounded or expected.dtype]
    err = (out.float() - expected.float()).abs().max().item()
    assert err <= (eps + 1e-6 * k ** 0.5) * scale * 2, err


@pytest.fixture
def no_tf32() -> Iterator[None]:
    saved = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved[0]
    torch.set_float32_matmul_precision(saved[1])


def _mlp(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
         b2: torch.Tensor) -> torch.Tensor:
    h = F.gelu(F.linear(F.layer_norm(x, x.shape[-1:]), w1, b1), approximate="tanh")
    return F.linear(h, w2, b2) + x


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mlp_block_default_heuristic(dtype: torch.dtype) -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(8, 512, 1024, device="cuda", generator=g).to(dtype)
    w1 = (torch.randn(4096, 1024, device="cuda", generator=g) * 0.03).to(dtype)
    b1 = torch.randn(4096, device="cuda", generator=g).to(dtype)
    w2 = (torch.randn(1024, 4096, device="cuda", generator=g) * 0.015).to(dtype)
    b2 = torch.randn(1024, device="cuda", generator=g).to(dtype)
    source, (out,) = _run(_mlp, [x, w1, b1, w2, b2], forced=None)
    # the first linear stays cuBLAS: its 4096x4096 result is stored slower by a template's
    # epilogue than cuBLAS and a separate kernel store and read it
    # (matmul_choice.EPILOGUE_BANDWIDTH); the second (K=4096, a 4096x1024 result) keeps
    # its bias and residual add in a TMA template's epilogue
    templates = re.findall(r"# matmul template: (\w+) \[M=(\d+), N=(\d+)\]", source)
    assert templates == [("addmm", "4096", "1024")], source
    assert "(TMA, persistent)" in source, source
    _check(out, _mlp(x, w1, b1, w2, b2), 4096)


@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (4096, 4096, 4096), (1000, 1000, 1000),
                                   (2048, 50257, 768)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gemm_bias_gelu_matches_eager(shape: tuple[int, int, int], dtype: torch.dtype) -> None:
    m, n, k = shape
    x = torch.randn(m, k, device="cuda").to(dtype)
    w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(dtype)
    b = torch.randn(n, device="cuda").to(dtype)

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.gelu(F.linear(x, w, b))

    source, (out,) = _run(fn, [x, w, b])
    assert "# matmul template: addmm" in source and "tl.dot(" in source
    _check(out, fn(x, w, b), k)


@pytest.mark.parametrize("tf32", [False, True])
def test_float32_precision_is_recorded(tf32: bool, no_tf32: None) -> None:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    x, w = torch.randn(512, 768, device="cuda"), torch.randn(768, 1024, device="cuda")

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w)

    source, (out,) = _run(fn, [x, w])
    assert f'input_precision="{"tf32" if tf32 else "ieee"}"' in source
    expected = fn(x, w)
    if tf32:
        # two TF32 dots (ours, cuBLAS's) of K=768: each off by ~1e-3 relative a product
        torch.testing.assert_close(out, expected, rtol=2e-2, atol=0.25)
    else:
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("config", ["bm64_bn64_bk64_g8_s3_w4_k4", "bm32_bn32_bk64_g8_s3_w4_k16"])
def test_split_k_matches_eager(config: str) -> None:
    x = torch.randn(64, 16384, device="cuda").bfloat16()
    w = torch.randn(16384, 96, device="cuda").bfloat16()

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w).float() * 0.5

    source, (out,) = _run(fn, [x, w], forced=config)
    assert "split-K" in source
    _check(out, fn(x, w), 16384, rounded=torch.bfloat16)


def test_bmm_prologue_and_transposed_operands() -> None:
    q = torch.randn(8, 16, 256, 64, device="cuda").bfloat16()
    k = torch.randn(8, 16, 256, 64, device="cuda").bfloat16()

    def fn(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return (q * 0.125) @ k.transpose(-1, -2)

    source, (out,) = _run(fn, [q, k])
    assert "# matmul template: bmm" in source
    _check(out, fn(q, k), 64)


def test_baddbmm_with_scales() -> None:
    c = torch.randn(16, 128, 256, device="cuda").half()
    a = torch.randn(16, 128, 512, device="cuda").half()
    b = torch.randn(16, 256, 512, device="cuda").half().transpose(-1, -2)

    def fn(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(c, a, b, beta=0.5, alpha=0.25)

    source, (out,) = _run(fn, [c, a, b])
    assert "# matmul template: baddbmm" in source
    _check(out, fn(c, a, b), 512)


def test_symbolic_m_program() -> None:
    from ember.inductor.compile import compile_program
    from ember.runtime.compiled import load_executor
    from ember.runtime.ir import parse_program

    text = '''program dialect=core-functional

graph forward(%x: bf16[s0, 1024]{1024,1} cuda:0, %w: bf16[1024, 4096]{4096,1} cuda:0, %b: bf16[4096]{1} cuda:0):
  symbols s0 in [2, inf] hint=512
  %h: bf16[s0, 4096]{4096,1} cuda:0 = aten::addmm.default(%b, %x, %w)
  %g: bf16[s0, 4096]{4096,1} cuda:0 = aten::gelu.default(%h)
  return (%g,)  [user_output]
'''
    program = parse_program(text)
    program.untrusted_origin = None
    compiled = compile_program(program, {"strict": True})
    compiled.untrusted_origin = None
    assert "M = s0" in _sources(compiled)
    run = load_executor(compiled, "forward")
    w = (torch.randn(1024, 4096, device="cuda") * 0.03).bfloat16()
    b = torch.randn(4096, device="cuda").bfloat16()
    for rows in (2, 100, 777, 2048):
        x = torch.randn(rows, 1024, device="cuda").bfloat16()
        (out,) = run([x, w, b])
        _check(out, F.gelu(torch.addmm(b, x, w)), 1024)


def test_plain_template_against_cublas() -> None:
    """The plain template's speed, printed next to cuBLAS's (informational bounds: the
    bench's matmul suite holds the real figures)."""
    from ember.inductor.codegen.backend import MatmulProblem
    from ember.inductor.codegen.triton.matmul_bench import plain_template_launch
    from triton.testing import do_bench

    a = torch.randn(4096, 4096, device="cuda").bfloat16()
    b = torch.randn(4096, 4096, device="cuda").bfloat16()
    problem = MatmulProblem("mm", None, 4096, 4096, 4096, torch.bfloat16, (4096, 1),
                            (4096, 1), True, False)
    run = plain_template_launch(problem, "bm128_bn128_bk64_g8_s3_w8", a, b)
    template = do_bench(run)
    cublas = do_bench(lambda: torch.mm(a, b))
    print(f"4096^3 bf16: template {template:.3f} ms, cuBLAS {cublas:.3f} ms "
          f"({cublas / template:.2f}x)")
    assert cublas / template > 0.5
