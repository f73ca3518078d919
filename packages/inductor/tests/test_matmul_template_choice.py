"""Matmul templates in the schedule and the choice between template and extern: golden
printed schedules (an epilogue and a prologue fused into the template's one kernel, the
extern with its epilogue apart), the default heuristic, the autotuner's candidates, the
config table, and that backends without templates (C++) keep calling ATen."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.backend import MatmulProblem
from ember.inductor.codegen.triton import matmul_choice
from ember.inductor.codegen.triton.matmul_choice import (
    choose_matmul,
    forced_matmul,
    heuristic_choice,
)
from ember.inductor.codegen.triton.matmul_configs import CONFIGS, MatmulConfig, shape_class
from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.inductor.loop_ir import format_kernel
from ember.inductor.idle_templates import lower_and_schedule
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.lowering.lowered_graph import LoweredGraph
from ember.inductor.scheduler import KernelStep, format_schedule, schedule
from ember.runtime.config import patch
from helpers import trace

pytest.importorskip("triton")

BF = torch.bfloat16
SMALL = "bm32_bn32_bk16_g8_s2_w4"


def _schedule(fn: Callable[..., Any], inputs: Sequence[torch.Tensor],
              forced: str | None = None, templates: bool = True) -> str:
    """The printed schedule as ``compile_graph`` makes it (idle templates lowered again
    as extern calls)."""
    program = trace(fn, inputs)

    def lower(idle: frozenset[str]) -> LoweredGraph:
        return GraphLowering(program, extern_matmuls=idle).run()

    choice = contextlib.nullcontext() if forced is None else forced_matmul(forced)
    with triton_for_cpu(matmul_templates=templates), choice:
        return format_schedule(lower_and_schedule(lower)[1])


def _block(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, r: torch.Tensor
           ) -> torch.Tensor:
    return (F.gelu(F.linear(x, w, b)) + r).float()


def _block_inputs() -> list[torch.Tensor]:
    return [torch.randn(40, 24).to(BF), torch.randn(36, 24).to(BF), torch.randn(36).to(BF),
            torch.randn(40, 36).to(BF)]


def test_bias_gelu_residual_cast_epilogue_is_one_kernel() -> None:
    assert _schedule(_block, _block_inputs(), SMALL) == (
        "kernel0 [40, 36] reduce [24] addmm template bm32_bn32_bk16_g8_s2_w4: "
        "buf0 (addmm template), buf1 (pointwise); loads arg0, arg1, arg2, arg3; stores buf1")


def test_an_epilogue_over_a_split_view_fuses() -> None:
    # GPT-2's MLP: the matmul's [B*S, N] result viewed as [B, S, N] before its tanh GELU;
    # the GELU reads (x0 // S)*S*N + (x0 % S)*N + x1, which is the template's store index
    # and the GELU's result is stored [B*S, N] for the next matmul
    def mlp(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, w2: torch.Tensor
            ) -> torch.Tensor:
        h = F.gelu(torch.addmm(b, x, w).view(4, 10, 36), approximate="tanh")
        return h.view(40, 36) @ w2

    inputs = [torch.randn(40, 24).to(BF), torch.randn(24, 36).to(BF), torch.randn(36).to(BF),
              torch.randn(36, 16).to(BF)]
    assert _schedule(mlp, inputs, SMALL) == (
        "kernel0 [40, 36] reduce [24] addmm template bm32_bn32_bk16_g8_s2_w4: "
        "buf0 (addmm template), buf1 (pointwise); loads arg0, arg1, arg2; stores buf1\n"
        "kernel1 [40, 16] reduce [36] mm template bm32_bn32_bk16_g8_s2_w4: "
        "buf2 (mm template); loads buf1, arg3; stores buf2")


def test_a_long_epilogue_stays_out_of_the_template() -> None:
    # HF GPT-2's GELU written out op by op in bf16 (each op rounds): 25 computations an
    # element, over the template's whole register tile slower than a separate pass
    def gelu_new(x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))

    def mlp(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return gelu_new(torch.addmm(b, x, w))

    inputs = [torch.randn(40, 24).to(BF), torch.randn(24, 36).to(BF), torch.randn(36).to(BF)]
    assert _schedule(mlp, inputs, SMALL) == (
        "kernel0 [40, 36] reduce [24] addmm template bm32_bn32_bk16_g8_s2_w4: "
        "buf0 (addmm template); loads arg0, arg1, arg2; stores buf0\n"
        "kernel1 [40, 36]: buf1 (pointwise); loads buf0; stores buf1")


def test_extern_keeps_its_epilogue_apart() -> None:
    assert _schedule(_block, _block_inputs(), "extern") == (
        "extern aten::addmm.default(arg0, arg1, arg2) -> buf0\n"
        "kernel0 [40, 36]: buf1 (pointwise); loads buf0, arg3; stores buf1")


def test_cast_and_transposed_view_prologue_fuse_into_the_loads() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x.to(BF) @ w.t()

    inputs = [torch.randn(40, 24), torch.randn(36, 24).to(BF)]
    assert _schedule(fn, inputs, SMALL) == (
        "kernel0 [40, 36] reduce [24] mm template bm32_bn32_bk16_g8_s2_w4: "
        "buf0 (mm template); loads arg0, arg1; stores buf0")
    # the extern needs the cast stored first
    assert _schedule(fn, inputs, "extern") == (
        "kernel0 [40, 24]: buf0 (pointwise); loads arg0; stores buf0\n"
        "extern aten::mm.default(arg1, buf0) -> buf1")


def test_lowered_graph_prints_the_matmul_node() -> None:
    program = trace(lambda x, w: x @ w, [torch.randn(40, 24), torch.randn(24, 36)])
    with triton_for_cpu(matmul_templates=True), forced_matmul(SMALL):
        lowered = GraphLowering(program).run()
        (step,) = schedule(lowered)
    text = str(lowered)
    assert isinstance(step, KernelStep)
    assert format_kernel(step.kernel).splitlines()[0] == (
        "kernel kernel0(arg0: float32[40, 24], arg1: float32[24, 36], buf0: float32[40, 36]) "
        "over [x0<40, x1<36] reduce [r0<24] (mm template bm32_bn32_bk16_g8_s2_w4):")
    assert ("buf0 = matmul over [40, 36] reduce [24] (mm template bm32_bn32_bk16_g8_s2_w4):"
            "  # from mm\n"
            "      v0: float32 = load arg0[(i0*24 + r0)]\n"
            "      v1: float32 = load arg1[(r0*36 + i1)]\n"
            "      v2: float32 = mul(v0, v1)\n"
            "      v3: float32 = reduce_sum(v2)\n"
            "      store buf0[(i0*36 + i1)] = v3") in text


def test_default_heuristic_in_the_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    # one 64x64 tile: too few programs to fill a GPU, cuBLAS
    assert _schedule(_block, _block_inputs()).startswith("extern aten::addmm.default")
    # NOTE: the occupancy rule off (the table above tests it): these shapes stay small
    monkeypatch.setattr(matmul_choice, "MIN_PROGRAMS", 1)
    # a fusable epilogue in bfloat16: the template (small class: 64x64x32)
    assert _schedule(_block, _block_inputs()).startswith(
        "kernel0 [40, 36] reduce [24] addmm template bm64_bn64_bk32_g8_s5_w4:")
    # a plain GEMM: cuBLAS
    plain = [torch.randn(40, 24).to(BF), torch.randn(24, 36).to(BF)]
    assert _schedule(lambda a, b: a @ b, plain) == "extern aten::mm.default(arg0, arg1) -> buf0"
    # a reduction consumer is no epilogue: cuBLAS
    assert _schedule(lambda a, b: (a @ b).softmax(-1), plain).startswith(
        "extern aten::mm.default(arg0, arg1) -> buf0")
    # a layer norm's output, which the template would store before reading, is no
    # prologue (GPT-2's LM head): cuBLAS after the layer norm's kernel
    ln = [torch.randn(40, 24).to(BF), torch.randn(24).to(BF), torch.randn(24).to(BF),
          torch.randn(36, 24).to(BF)]
    lm_head = _schedule(lambda x, w, b, e: F.linear(F.layer_norm(x, (24,), w, b), e), ln)
    assert "extern aten::mm.default(" in lm_head and "template" not in lm_head, lm_head
    # a bias alone is no work to fuse: cuBLAS adds it in its own epilogue (HF GPT-2 on
    # the H200: 5.36-5.38 ms with its bias-only GEMMs on cuBLAS, 5.42-5.48 as templates)
    assert _schedule(lambda x, w, b: F.linear(x, w, b), _block_inputs()[:3]) == (
        "extern aten::addmm.default(arg0, arg1, arg2) -> buf0")
    # a cheap producer (a scale) is inlined into the template's loads: still the template
    scaled = _schedule(lambda a, b: (a * 2.0) @ b, plain)
    assert scaled.startswith("kernel0 [40, 36] reduce [24] mm template"), scaled


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[MatmulProblem]:
    """The problems the heuristic is asked about, in order."""
    asked: list[MatmulProblem] = []
    real = matmul_choice.heuristic_choice

    def spy(problem: MatmulProblem, tma: bool | None = None) -> str:
        asked.append(problem)
        return real(problem, tma)

    monkeypatch.setattr(matmul_choice, "heuristic_choice", spy)
    return asked


def test_the_problem_says_whether_only_an_epilogue_fuses(seen: list[MatmulProblem]) -> None:
    # the store's cost (EPILOGUE_BANDWIDTH) counts against a template chosen for its
    # epilogue, not against one that inlines a producer or spares the extern's padding
    plain = [torch.randn(40, 24).to(BF), torch.randn(24, 36).to(BF)]
    _schedule(_block, _block_inputs())
    _schedule(lambda a, b: (a * 2.0) @ b, plain)
    assert [(p.fuses, p.epilogue_only) for p in seen] == [(True, True), (True, False)]


def test_the_problem_says_whether_a_reduction_reads_the_epilogue(
        seen: list[MatmulProblem]) -> None:
    # a residual add before a norm: with the extern, the norm's kernel takes the add in
    def rms_after(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        h = (x @ w).view(2, 20, 36) + r
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)

    def mlp(x: torch.Tensor, w: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ w) @ w2

    def too_far(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        # the reduction four pointwise ops past the epilogue's first
        return ((((x @ w).view(2, 20, 36) + r).exp() * 2.0).sin() - 1.0).sum(-1)

    x, w = torch.randn(40, 24).to(BF), torch.randn(24, 36).to(BF)
    r = torch.randn(2, 20, 36).to(BF)
    _schedule(rms_after, [x, w, r])
    _schedule(mlp, [x, w, torch.randn(36, 24).to(BF)])
    _schedule(too_far, [x, w, r])
    assert [(p.epilogue_only, p.reduced) for p in seen] == [
        (True, True), (True, False), (True, False), (True, False)]


def test_an_unaligned_result_the_extern_would_pad_takes_the_template(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GPT-2's LM head (50257 columns) on the H200: the extern ran padded, its result
    # copied out of the padded one (+0.6 ms, +785 MiB against the template)
    from ember.inductor.codegen.triton import testing
    from ember.inductor.lowering import matmul_padding

    monkeypatch.setattr(matmul_choice, "MIN_PROGRAMS", 1)
    monkeypatch.setattr(matmul_padding, "PAD_MATMUL_MIN_NUMEL", 1)
    monkeypatch.setattr(testing.TritonOnCpuTemplatesBackend, "pads_unaligned_matmuls", True)

    def lm_head(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, e: torch.Tensor
                ) -> torch.Tensor:
        return F.linear(F.layer_norm(x, (24,), w, b), e)

    def inputs(n: int) -> list[torch.Tensor]:
        return [torch.randn(40, 24).to(BF), torch.randn(24).to(BF), torch.randn(24).to(BF),
                torch.randn(n, 24).to(BF)]

    unaligned = _schedule(lm_head, inputs(37))
    assert "mm template" in unaligned and "constant_pad_nd" not in unaligned, unaligned
    aligned = _schedule(lm_head, inputs(40))
    assert "extern aten::mm.default(" in aligned and "template" not in aligned, aligned


def test_backends_without_templates_call_aten() -> None:
    assert _schedule(_block, _block_inputs(), SMALL, templates=False).startswith(
        "extern aten::addmm.default(arg0, arg1, arg2) -> buf0")
    from ember.inductor.codegen.cpp.backend import CppBackend
    assert not CppBackend.matmul_templates


def _problem(m: int = 256, n: int = 256, k: int = 256, dtype: torch.dtype = BF,
             fuses: bool = True, tf32: bool = False, batch: int | None = None,
             epilogue_only: bool = False, reduced: bool = False) -> MatmulProblem:
    return MatmulProblem("mm" if batch is None else "bmm", batch, m, n, k, dtype,
                         (k, 1), (n, 1), fuses, tf32, epilogue_only, reduced)


@pytest.mark.parametrize(("problem", "choice"), [
    (_problem(2048, 2048), "bm128_bn128_bk64_g8_s3_w4"),  # 128x256 tiles: 128 programs, too few
    (_problem(8192, 3072, 768), "bm128_bn256_bk64_g8_s3_w8"),    # large, 16-bit: the MLP's fc1
    (_problem(64, 16384), "bm64_bn64_bk32_g8_s5_w4"),            # small
    (_problem(64, 512), "extern"),                               # 8 tiles: too few programs
    (_problem(4, 2304, 768), "extern"),                          # a decode step's GEMM
    (_problem(32, 32, 4096), "extern"),                          # skinny: split-K is autotuned
    (_problem(32, 32, 4096, batch=256), "bm64_bn64_bk32_g8_s5_w4"),  # batched: no split
    (_problem(fuses=False), "extern"),                           # plain GEMM: cuBLAS
    (_problem(dtype=torch.float32), "extern"),                   # float32 without TF32
    (_problem(2048, 2048, dtype=torch.float32, tf32=True), "bm128_bn128_bk32_g8_s3_w8"),
    (_problem(8, 256), "extern"),                                # below MIN_SIDE
    (_problem(4096, 4096, 1024), "bm128_bn256_bk64_g8_s3_w8"),   # fusing saves more
    (_problem(4096, 4096, 4096), "extern"),                      # compute-bound: cuBLAS
    # an epilogue alone: the template's store runs at EPILOGUE_BANDWIDTH (a GPT MLP's
    # fc1 + GELU, inference and training: cuBLAS and a separate GELU kernel)
    (_problem(8192, 3072, 768, epilogue_only=True), "extern"),
    (_problem(16384, 3072, 768, epilogue_only=True), "extern"),
    (_problem(4096, 4096, 1024, epilogue_only=True), "extern"),
    # a small result stores little: the saved launch and round trip still win
    (_problem(8192, 768, 768, epilogue_only=True), "bm128_bn128_bk64_g8_s3_w4"),
    (_problem(64, 16384, epilogue_only=True), "bm64_bn64_bk32_g8_s5_w4"),
    # an epilogue a reduction reads (Llama's residual add before its RMSNorm) saves one
    # pass over the result and no launch (the norm's kernel would take the add in): H100,
    # hf_llama training, 0.930x of torch.compile with these on templates, 0.985x on cuBLAS
    (_problem(4096, 1024, 1024, epilogue_only=True), "bm128_bn128_bk64_g8_s3_w4"),
    (_problem(4096, 1024, 1024, epilogue_only=True, reduced=True), "extern"),
    # a prologue still saves both passes
    (_problem(4096, 1024, 1024, reduced=True), "bm128_bn128_bk64_g8_s3_w4"),
    # an unaligned side slows cuBLAS, which the store's cost was not measured against
    # (Llama's 2730-wide MLP): the model as without it
    (_problem(4096, 2730, 1024, epilogue_only=True), "bm64_bn128_bk64_g8_s4_w4"),
])
def test_heuristic_table(problem: MatmulProblem, choice: str) -> None:
    assert heuristic_choice(problem) == choice


def test_choice_under_autotuning_asks_select_with_every_candidate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.inductor import autotune

    asked: list[tuple[str, Mapping[str, object], list[str], str]] = []

    def fake_select(kind: str, key: Mapping[str, object], candidates: Sequence[Any],
                    default: str) -> str:
        asked.append((kind, key, [c.name for c in candidates], default))
        return str(candidates[2].name)

    monkeypatch.setattr(autotune, "select", fake_select)
    with autotune.autotuning(True):
        template = choose_matmul(_problem(64, 512))
    kind, key, names, default = asked[0]
    assert kind == "mm" and default == "extern_mm"  # 8 tiles: the heuristic's cuBLAS
    assert key == {"op": "mm", "batch": 1, "m": 64, "n": 512, "k": 256, "dtype": "bfloat16",
                   "a": [256, 1], "b": [512, 1], "tf32": False}
    assert names == ["extern_mm"] + [f"triton_mm_{c.name}" for c in CONFIGS[("16-bit", "small")]]
    assert template is not None and template.config == CONFIGS[("16-bit", "small")][1].name
    # outside the block: the heuristic, select is not asked
    assert choose_matmul(_problem(64, 512)) is None and len(asked) == 1


def test_template_candidate_runs() -> None:
    """The autotuner's template candidate builds and runs (here in the interpreter)."""
    problem = _problem(32, 32, 32, dtype=torch.float32)
    run = matmul_choice._template_runner(problem, SMALL)()
    run()
    matmul_choice._extern_runner(problem)()()


def test_config_names() -> None:
    for configs in CONFIGS.values():
        for c in configs:
            assert MatmulConfig.parse(c.name) == c
    with pytest.raises(ValueError, match="not a matmul template config name"):
        MatmulConfig.parse("bm64")
    with pytest.raises(ValueError), forced_matmul("fastest"):
        pass
    assert shape_class(32, 32, 4096, batched=False) == "skinny"


def _new_gelu(x: torch.Tensor) -> torch.Tensor:
    # HF GPT-2's tanh GELU, op by op: 25 computations in bfloat16, over EPILOGUE_MAX_WORK
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                       * (x + 0.044715 * torch.pow(x, 3.0))))


def test_a_template_left_without_its_epilogue_is_lowered_again_as_the_extern(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(matmul_choice, "MIN_PROGRAMS", 1)
    x, w, b, r = _block_inputs()
    with patch(logs=frozenset({"autotune"})):
        # the residual add joins the layer norm's kernel (GPT-2's blocks), not the template
        residual_ln = _schedule(
            lambda x, w, b, r: F.layer_norm(F.linear(x, w, b) + r, (36,)), [x, w, b, r])
        long_gelu = _schedule(lambda x, w, b: _new_gelu(F.linear(x, w, b)), [x, w, b])
        # an epilogue that fuses keeps its template; so does a forced one left idle
        exact_gelu = _schedule(lambda x, w, b: F.gelu(F.linear(x, w, b)), [x, w, b])
        forced = _schedule(lambda x, w, b: _new_gelu(F.linear(x, w, b)), [x, w, b], SMALL)
    assert residual_ln == (
        "extern aten::addmm.default(arg0, arg1, arg2) -> buf0\n"
        "kernel0 [40] reduce [36]: buf1 (sum), buf2 (sum), buf3 (pointwise); loads buf0, "
        "arg3; stores buf3"), residual_ln
    assert long_gelu == (
        "extern aten::addmm.default(arg0, arg1, arg2) -> buf0\n"
        "kernel0 [40, 36]: buf1 (pointwise); loads buf0; stores buf1"), long_gelu
    assert exact_gelu.startswith("kernel0 [40, 36] reduce [24] addmm template") \
        and "buf1 (pointwise)" in exact_gelu.splitlines()[0], exact_gelu
    assert forced.startswith(f"kernel0 [40, 36] reduce [24] addmm template {SMALL}: "
                             "buf0 (addmm template); "), forced
    log = capsys.readouterr().err
    assert log.count("matmul addmm: extern (no epilogue fused into its template") == 2, log


def test_the_fullest_last_wave_picks_the_config() -> None:
    # GPT-2's fc2 on the H200 (8192x768, K=3072): 128x256 tiles are 192 (0.73 of a second
    # wave); 128x128 tiles are 384 (0.97 of three): the sweep's fastest TMA config
    from ember.inductor.codegen.triton.matmul_configs import TMA_CONFIGS

    fc2 = MatmulProblem("mm", None, 8192, 768, 3072, BF, (3072, 1), (768, 1), True, False)
    first, second = TMA_CONFIGS[("16-bit", "large")][:2]
    assert round(matmul_choice.wave_efficiency(fc2, first), 2) == 0.73
    assert round(matmul_choice.wave_efficiency(fc2, second), 2) == 0.97
    assert heuristic_choice(fc2, tma=True) == second.name
    # fc1 (8192x3072): both fill their waves alike; the table's first config stays
    fc1 = MatmulProblem("mm", None, 8192, 3072, 768, BF, (768, 1), (3072, 1), True, False)
    assert heuristic_choice(fc1, tma=True) == first.name
