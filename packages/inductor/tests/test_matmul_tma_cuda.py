"""The persistent TMA matmul variant on a Hopper GPU: the default heuristic takes it for
a GEMM + GELU whose result is small enough that the epilogue's store does not outweigh
the fusion, and keeps cuBLAS for the MLP block's (``matmul_choice.EPILOGUE_BANDWIDTH``);
numerics against eager (bfloat16,
float16, TF32; transposed weights; sizes no tile divides), symbolic M at several sizes,
the fallback to the pointer template for an unaligned operand, a CUDA-graph capture
(the descriptors' scratch memory is allocated at each launch), and its speed next to
cuBLAS (printed). Skipped without an sm_90 GPU; run on the H200
(``pytest -m cuda packages/inductor/tests/test_matmul_tma_cuda.py``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.triton.matmul_choice import forced_matmul
from ember.runtime.config import patch
from ember.runtime.ir import Program
from helpers import compile_and_load, trace

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available()
                       or torch.cuda.get_device_capability() != (9, 0),
                       reason="needs an sm_90 (Hopper) GPU"),
]

TMA = "(TMA, persistent)"


def _sources(compiled: Program) -> str:
    return "\n".join(v.decode() for k, v in compiled.files.items()
                     if k.endswith(".py") and not k.endswith("wrapper.py"))


def _run(fn: Callable[..., Any], xs: list[torch.Tensor], forced: str | None = None
         ) -> tuple[str, list[torch.Tensor]]:
    program = trace(fn, xs)
    if forced is None:
        compiled, run = compile_and_load(program)
    else:
        with forced_matmul(forced):
            compiled, run = compile_and_load(program)
    return _sources(compiled), run(*xs)


def _check(out: torch.Tensor, expected: torch.Tensor, k: int) -> None:
    """Within the accumulation error of a K-long float32 dot plus one rounding to the
    result's dtype (bfloat16/float16), or TF32's for float32."""
    scale = expected.float().abs().max().item() + 1
    eps = {torch.float32: 2e-3, torch.bfloat16: 1e-2, torch.float16: 2e-3}[expected.dtype]
    err = (out.float() - expected.float()).abs().max().item()
    assert err <= (eps + 1e-6 * k ** 0.5) * scale * 2, err


def _mlp(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
         b2: torch.Tensor) -> torch.Tensor:
    h = F.gelu(F.linear(F.layer_norm(x, x.shape[-1:]), w1, b1))
    return x + F.linear(h, w2, b2)


def _mlp_inputs(tokens: int, width: int, dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(0)
    hidden = 4 * width
    return [torch.randn(tokens, width, device="cuda", generator=g).to(dtype),
            (torch.randn(hidden, width, device="cuda", generator=g) / width ** 0.5).to(dtype),
            torch.randn(hidden, device="cuda", generator=g).to(dtype),
            (torch.randn(width, hidden, device="cuda", generator=g) / hidden ** 0.5).to(dtype),
            torch.randn(width, device="cuda", generator=g).to(dtype)]


@pytest.mark.parametrize("width", [768, 1024])
def test_mlp_block_default_heuristic_keeps_cublas(width: int) -> None:
    """The bench's MLP block (8192 tokens): both linears stay cuBLAS calls, their bias +
    GELU and residual add a kernel apart (the templates' epilogues stored their large
    results slower than cuBLAS and a separate kernel: ``docs/benchmarks.md``, session
    38); forced, both are TMA templates."""
    xs = _mlp_inputs(8192, width, torch.bfloat16)
    source, (out,) = _run(_mlp, xs)
    assert "# matmul template" not in source, source
    _check(out, _mlp(*xs), 4 * width)
    source, (out,) = _run(_mlp, xs, forced="tma")
    assert source.count(TMA) == 2, source
    _check(out, _mlp(*xs), 4 * width)


@pytest.mark.parametrize("shape", [(8192, 3072, 768), (4096, 4096, 4096), (1000, 1000, 1000),
                                   (2048, 50257, 768), (333, 1024, 4096)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gemm_bias_gelu_matches_eager(shape: tuple[int, int, int], dtype: torch.dtype) -> None:
    m, n, k = shape
    x = torch.randn(m, k, device="cuda").to(dtype)
    w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(dtype)
    b = torch.randn(n, device="cuda").to(dtype)

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.gelu(F.linear(x, w, b))

    source, (out,) = _run(fn, [x, w, b], forced="tma")
    assert TMA in source and "tl.trans(b_desc" in source
    _check(out, fn(x, w, b), k)


@pytest.mark.parametrize(("n", "template"), [(768, True), (3072, False)])
def test_default_heuristic_for_gemm_bias_gelu(n: int, template: bool) -> None:
    # 8192x768 results: the TMA template with the epilogue; 8192x3072: cuBLAS, the
    # template's epilogue store costing more than the fusion saves
    x = torch.randn(8192, 768, device="cuda").bfloat16()
    w = (torch.randn(768, n, device="cuda") / 768 ** 0.5).bfloat16()  # row-major B
    b = torch.randn(n, device="cuda").bfloat16()

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ w + b)

    source, (out,) = _run(fn, [x, w, b])
    if template:
        assert TMA in source and "tl.trans(" not in source
    else:
        assert "# matmul template" not in source, source
    _check(out, fn(x, w, b), 768)


def test_tf32_matches_eager() -> None:
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        a, b = torch.randn(1024, 512, device="cuda"), torch.randn(512, 768, device="cuda")

        def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.relu(a @ b)

        source, (out,) = _run(fn, [a, b], forced="tma")
        assert TMA in source and 'input_precision="tf32"' in source
        _check(out, fn(a, b), 512)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def test_symbolic_m_program() -> None:
    from ember.inductor.compile import compile_program
    from ember.runtime.compiled import load_executor
    from ember.runtime.ir import parse_program

    text = '''program dialect=core-functional

graph forward(%x: bf16[s0, 1024]{1024,1} cuda:0, %w: bf16[4096, 1024]{1024,1} cuda:0, %b: bf16[4096]{1} cuda:0):
  symbols s0 in [2, inf] hint=2048
  %t: bf16[1024, 4096]{1,1024} cuda:0 = aten::t.default(%w)
  %h: bf16[s0, 4096]{4096,1} cuda:0 = aten::addmm.default(%b, %x, %t)
  %g: bf16[s0, 4096]{4096,1} cuda:0 = aten::gelu.default(%h)
  return (%g,)  [user_output]
'''
    program = parse_program(text)
    program.untrusted_origin = None
    compiled = compile_program(program, {"strict": True})
    compiled.untrusted_origin = None
    source = _sources(compiled)
    assert TMA in source and "M = s0" in source
    run = load_executor(compiled, "forward")
    w = (torch.randn(4096, 1024, device="cuda") * 0.03).bfloat16()
    b = torch.randn(4096, device="cuda").bfloat16()
    for rows in (2, 100, 777, 4096, 20000):
        x = torch.randn(rows, 1024, device="cuda").bfloat16()
        (out,) = run([x, w, b])
        _check(out, F.gelu(F.linear(x, w, b)), 1024)


def test_unaligned_operand_takes_the_pointer_template(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    x = torch.randn(4096, 770, device="cuda").bfloat16()  # rows of 1540 bytes
    w = (torch.randn(3072, 770, device="cuda") / 770 ** 0.5).bfloat16()
    b = torch.randn(3072, device="cuda").bfloat16()

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.gelu(F.linear(x, w, b))

    with patch(logs="autotune"):
        source, (out,) = _run(fn, [x, w, b])
    assert TMA not in source
    assert "TMA variant not applicable: operand A: row stride 770" in capsys.readouterr().err
    _check(out, fn(x, w, b), 770)


def test_runs_under_cuda_graph_capture() -> None:
    """The launch asks the module's allocator for the descriptors' scratch memory, which
    a capture takes from the graph's pool; replays recompute with new inputs."""
    xs = _mlp_inputs(2048, 768, torch.bfloat16)
    program = trace(_mlp, xs)
    with forced_matmul("tma"):
        compiled, run = compile_and_load(program)
    assert _sources(compiled).count(TMA) == 2
    run(*xs)  # compiles and binds the kernels outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run(*xs)
        with torch.cuda.graph(graph, stream=stream):
            (out,) = run(*xs)
    torch.cuda.current_stream().wait_stream(stream)
    xs[0].copy_(torch.randn_like(xs[0]))
    graph.replay()
    torch.cuda.synchronize()
    _check(out, _mlp(*xs), 3072)


def test_speed_next_to_cublas() -> None:
    """The variant's plain GEMM and the MLP's fc2 shape beside cuBLAS (printed; the
    bound is loose: the bench's matmul suite holds the real figures)."""
    from ember.inductor.codegen.backend import MatmulProblem
    from ember.inductor.codegen.triton.matmul_bench import plain_template_launch
    from ember.inductor.codegen.triton.matmul_configs import TMA_CONFIGS
    from triton.testing import do_bench

    for m, n, k in ((4096, 4096, 4096), (8192, 768, 3072), (8192, 3072, 768)):
        a = torch.randn(m, k, device="cuda").bfloat16()
        b = torch.randn(k, n, device="cuda").bfloat16()
        problem = MatmulProblem("mm", None, m, n, k, torch.bfloat16, (k, 1), (n, 1), True,
                                False)
        cublas = do_bench(lambda a=a, b=b: torch.mm(a, b))
        configs = TMA_CONFIGS[("16-bit", "large")]
        times = []
        for config in configs:
            run = plain_template_launch(problem, config.name, a, b)
            times.append(do_bench(run))
            print(f"{m}x{n}x{k} bf16 {config.name}: {times[-1] * 1e3:.1f} us, cuBLAS "
                  f"{cublas * 1e3:.1f} us ({cublas / times[-1]:.2f}x)")
        # NOTE: the suite runs with -n 4 beside other GPU tests: one timing can be twice
        # the quiet figure, so both sides are the best of two measurements
        first = min(times[0], do_bench(plain_template_launch(problem, configs[0].name, a, b)))
        cublas = min(cublas, do_bench(lambda a=a, b=b: torch.mm(a, b)))
        assert cublas / first > 0.5, (m, n, k, cublas, first)
