"""Choosing the persistent TMA matmul variant: the rules that keep it out (each with its
reason), the default heuristic's table on sm_90 and elsewhere, the log line that says
why, the autotuner's candidates, the config names, and the fallback to the pointer
template where a kernel turns out not to suit it."""

from __future__ import annotations


import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor import autotune
from ember.inductor.codegen.backend import MatmulProblem
from ember.inductor.codegen.triton import matmul_choice
from ember.inductor.codegen.triton.matmul_choice import (
    choose_matmul,
    forced_matmul,
    heuristic_choice,
)
from ember.inductor.codegen.triton.matmul_configs import (
    CONFIGS,
    TMA_CONFIGS,
    MatmulConfig,
)
from ember.inductor.codegen.triton.matmul_tma import HOPPER, assume_capability, tma_reason
from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.runtime import phases
from ember.runtime.config import patch
from helpers import compile_and_load, trace

pytest.importorskip("triton")

BF = torch.bfloat16


def _problem(m: int = 8192, n: int = 3072, k: int = 768, dtype: torch.dtype = BF,
             a: tuple[Any, ...] | None = None, b: tuple[Any, ...] | None = None,
             fuses: bool = True, tf32: bool = False, batch: int | None = None
             ) -> MatmulProblem:
    return MatmulProblem("mm" if batch is None else "bmm", batch, m, n, k, dtype,
                         (k, 1) if a is None else a, (n, 1) if b is None else b, fuses, tf32)


@pytest.fixture
def hopper() -> Iterator[None]:
    with assume_capability(HOPPER):
        yield


@pytest.mark.parametrize(("capability", "problem", "reason"), [
    (HOPPER, _problem(), None),
    (HOPPER, _problem(b=(1, 768)), None),                     # a linear's weight: w.t()
    (HOPPER, _problem(a=(1, 8192)), None),                    # a transposed A
    (HOPPER, _problem(dtype=torch.float32, tf32=True), None),
    (None, _problem(), "the device is not sm_90 (Hopper): no CUDA device"),
    ((8, 0), _problem(), "the device is not sm_90 (Hopper): sm_80"),
    ((10, 0), _problem(), "the device is not sm_90 (Hopper): sm_100"),
    (HOPPER, _problem(dtype=torch.float32), "torch.float32 without TF32 allowed"),
    (HOPPER, _problem(batch=4), "bmm is batched"),
    (HOPPER, MatmulProblem("mm", None, 64, 64, 64, BF, None, (64, 1), True, False),
     None),  # computed: stored or a prologue, the writer decides
    (HOPPER, _problem(k=772, a=(772, 1)),
     "operand A: row stride 772 x 2 bytes is not a multiple of 16 bytes"),
    (HOPPER, _problem(n=3076, b=(3076, 1)),
     "operand B: row stride 3076 x 2 bytes is not a multiple of 16 bytes"),
    (HOPPER, _problem(b=(2, 6144)), "operand B: strides (2, 6144) have no unit stride"),
    (HOPPER, _problem(a=(0, 1)), "operand A: row stride 0 (a broadcast)"),
])
def test_rules(capability: tuple[int, int] | None, problem: MatmulProblem,
               reason: str | None) -> None:
    with assume_capability(capability):
        assert tma_reason(problem) == reason


@pytest.mark.parametrize(("problem", "choice"), [
    (_problem(), "tma_bm128_bn256_bk64_g8_s3_w8"),                # the MLP's fc1
    # fc2: 192 tiles of 128x256 fill 0.73 of their second wave, 384 of 128x128 0.97
    (_problem(8192, 768, 3072, b=(1, 3072)), "tma_bm128_bn128_bk64_g8_s4_w8"),
    (_problem(2048, 2048, 256), "tma_bm128_bn128_bk64_g8_s4_w8"),  # 128 tiles of 128x256
    (_problem(64, 32768, 256), "tma_bm64_bn128_bk64_g8_s4_w4"),    # small
    (_problem(64, 16384, 256), "tma_bm64_bn64_bk64_g8_s4_w4"),     # small, fewer tiles
    (_problem(256, 256, 256, batch=64), "bm128_bn128_bk64_g8_s3_w4"),  # batched: pointer
    (_problem(k=770, a=(770, 1)), "bm128_bn256_bk64_g8_s3_w8"),     # unaligned: pointer
    (_problem(32, 32, 4096), "extern"),                             # skinny
    (_problem(fuses=False), "extern"),                              # plain GEMM: cuBLAS
    (_problem(4096, 4096, 8192), "extern"),                         # compute-bound
    (_problem(4096, 4096, 4096), "tma_bm128_bn256_bk64_g8_s3_w8"),  # TMA's smaller deficit
])
def test_heuristic_table_on_hopper(hopper: None, problem: MatmulProblem, choice: str) -> None:
    assert heuristic_choice(problem) == choice


def test_a_pointer_config_picked_where_tma_applies_is_priced_as_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 2048x768 (K=3072): 64x128 pointer tiles fill the last wave best, so the pick is a
    # pointer config even where TMA applies; priced at TEMPLATE_EFFICIENCY it loses to
    # cuBLAS (at TMA_EFFICIENCY, as the pick were a TMA config, it would not)
    problem = _problem(2048, 768, 3072)
    assert heuristic_choice(problem, tma=True) == heuristic_choice(problem, tma=False) \
        == "extern"
    monkeypatch.setattr(matmul_choice, "TEMPLATE_EFFICIENCY", matmul_choice.TMA_EFFICIENCY)
    assert heuristic_choice(problem, tma=True) == "bm64_bn128_bk64_g8_s4_w4"


def test_heuristic_elsewhere_keeps_the_pointer_template() -> None:
    with assume_capability((8, 0)):
        assert heuristic_choice(_problem()) == "bm128_bn256_bk64_g8_s3_w8"
        assert heuristic_choice(_problem(4096, 4096, 4096)) == "extern"


def test_log_says_why_the_variant_is_not_used(capsys: pytest.CaptureFixture[str]) -> None:
    with patch(logs="autotune"):
        with assume_capability((8, 0)):
            choose_matmul(_problem())
        with assume_capability(HOPPER):
            choose_matmul(_problem())
            choose_matmul(_problem(), "cpu")  # a CPU graph's Triton kernels (tests)
    err = capsys.readouterr().err
    assert ("bm128_bn256_bk64_g8_s3_w8 (heuristic); TMA variant not applicable: a cpu "
            "graph (its Triton kernels run in Triton's interpreter") in err
    assert ("matmul mm [M=8192, N=3072, K=768] torch.bfloat16: bm128_bn256_bk64_g8_s3_w8 "
            "(heuristic); TMA variant not applicable: the device is not sm_90 (Hopper): "
            "sm_80") in err
    assert ("matmul mm [M=8192, N=3072, K=768] torch.bfloat16: "
            "tma_bm128_bn256_bk64_g8_s3_w8 (heuristic)\n") in err


def test_autotuning_times_the_tma_configs_first(hopper: None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[Mapping[str, object], list[str], str]] = []

    def fake_select(kind: str, key: Mapping[str, object], candidates: Sequence[Any],
                    default: str) -> str:
        asked.append((key, [c.name for c in candidates], default))
        return str(candidates[1].name)

    monkeypatch.setattr(autotune, "select", fake_select)
    with autotune.autotuning(True):
        template = choose_matmul(_problem())
    key, names, default = asked[0]
    assert key["tma"] is True  # decisions cached before the variant are not reused
    configs = TMA_CONFIGS[("16-bit", "large")] + CONFIGS[("16-bit", "large")]
    assert names == ["extern_mm"] + [f"triton_mm_{c.name}" for c in configs]
    assert default == "triton_mm_tma_bm128_bn256_bk64_g8_s3_w8"
    assert template is not None and template.config == configs[0].name


def test_forced_choices() -> None:
    with assume_capability(None):
        with forced_matmul("tma"):
            template = choose_matmul(_problem())
        assert template is not None and template.config == "tma_bm128_bn256_bk64_g8_s3_w8"
        with forced_matmul("template"):
            template = choose_matmul(_problem())
        assert template is not None and template.config == "bm128_bn256_bk64_g8_s3_w8"


def test_config_names() -> None:
    for configs in TMA_CONFIGS.values():
        for c in configs:
            assert c.tma and c.name.startswith("tma_") and MatmulConfig.parse(c.name) == c
    assert not MatmulConfig.parse("bm64_bn64_bk32_g8_s4_w4").tma
    with pytest.raises(ValueError, match="no split-K form"):
        MatmulConfig.parse("tma_bm64_bn64_bk32_g8_s3_w4_k4")


def test_a_prologue_falls_back_to_the_pointer_template(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Forced onto a matmul whose A is computed (a scale and a cast fused into the
    loads): the pointer template with the same tiles, logged and counted."""
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x * 0.5).to(BF) @ w.t()

    x, w = torch.randn(40, 24), torch.randn(36, 24).to(BF)
    with patch(logs="autotune"), \
            triton_for_cpu(matmul_templates=True), \
            forced_matmul("tma_bm32_bn32_bk16_g8_s3_w4"):
        compiled, run = compile_and_load(trace(fn, [x, w]), precompile=False)
    source = "\n".join(v.decode() for k, v in compiled.files.items()
                       if k.endswith(".py") and not k.endswith("wrapper.py"))
    assert "make_tensor_descriptor" not in source
    assert ", bm32_bn32_bk16_g8_s3_w4\n" in source
    assert "TMA variant not used (operand A has a fused prologue" in capsys.readouterr().err
    profile = phases.last_compile_profile()
    assert profile is not None and profile.counts.get("matmul TMA fallbacks") == 1
    (out,) = run(x, w)
    expected = fn(x, w)
    assert (out.float() - expected.float()).abs().max().item() < 0.1


SYMBOLIC_K = """program dialect=core-functional

graph forward(%x: bf16[16, s1]{s1,1} cpu, %w: bf16[s1, 24]{24,1} cpu):
  symbols s1 in [2, inf] hint=40
  %h: bf16[16, 24]{24,1} cpu = aten::mm.default(%x, %w)
  %g: bf16[16, 24]{24,1} cpu = aten::relu.default(%h)
  return (%g,)  [user_output]
"""


def _offset_view(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x[:, 3:35] @ w)


def _broadcast(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x.expand(40, 32) @ w)


def _batched(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(torch.bmm(a, b))


@pytest.mark.parametrize(("case", "reason"), [
    ("symbolic_k", "operand A: row stride s1 is not provably a multiple of 16 bytes"),
    ("offset", "operand A starts at an offset (3 elements: TMA needs an aligned base)"),
    ("batched", "bmm is batched"),
    ("broadcast", "operand A: row stride 0 (a broadcast)"),
])
def test_kernels_that_do_not_suit_the_variant(case: str, reason: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from ember.inductor.compile import compile_program
    from ember.runtime.ir import parse_program

    with patch(logs="autotune"), triton_for_cpu(matmul_templates=True), \
            forced_matmul("tma_bm32_bn32_bk16_g8_s3_w4"):
        if case == "symbolic_k":
            program = parse_program(SYMBOLIC_K)
            program.untrusted_origin = None
            compiled = compile_program(program, {"precompile": False, "strict": True})
        elif case == "offset":
            compiled, _ = compile_and_load(trace(_offset_view, [
                torch.randn(40, 48).to(BF), torch.randn(32, 24).to(BF)]), precompile=False)
        elif case == "broadcast":
            compiled, _ = compile_and_load(trace(_broadcast, [
                torch.randn(1, 32).to(BF), torch.randn(32, 24).to(BF)]), precompile=False)
        else:
            compiled, _ = compile_and_load(trace(_batched, [
                torch.randn(2, 40, 32).to(BF), torch.randn(2, 32, 24).to(BF)]),
                precompile=False)
    source = "\n".join(v.decode() for k, v in compiled.files.items()
                       if k.endswith(".py") and not k.endswith("wrapper.py"))
    assert "make_tensor_descriptor" not in source and "bm32_bn32_bk16_g8_s3_w4" in source
    assert f"TMA variant not used ({reason})" in capsys.readouterr().err


def test_tma_candidate_runs() -> None:
    """The autotuner's TMA candidate builds and runs (here in the interpreter, when its
    Triton has tensor descriptors)."""
    from triton.runtime import interpreter

    if not hasattr(interpreter.InterpreterBuilder, "create_make_tensor_descriptor"):
        pytest.skip("this Triton's interpreter has no tensor descriptors")
    problem = _problem(64, 48, 32)
    matmul_choice._template_runner(problem, "tma_bm32_bn32_bk16_g8_s3_w4")()()
