"""The attention rewrite on SDPA's own math path (``_scaled_dot_product_attention_math``,
what torch records for ``F.scaled_dot_product_attention`` when it picks no fused kernel):
printed IR before and after (golden files ``attention_golden/sdpa_math*.txt``, rewritten
by ``python packages/inductor/tests/test_attention_rewrite_sdpa_math.py``), the compiled
result against eager on the CPU in float32, bfloat16 and float16, fully masked rows, and
the forms that must not become a bfloat16 SDPA (hand-written upcasts, no source line)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from attention_cases import (
    MATH_CASES,
    SDPA_LINE,
    core_program,
    math_program,
    padding_mask,
    qkv,
    sdpa_math,
    sdpa_math_mask,
)
from ember.inductor.passes import attention_to_sdpa, dead_code_elimination
from ember.inductor.passes.attention import _math_scale
from ember.inductor.passes.attention_patterns import ATTENTION_PATTERNS
from ember.runtime.config import patch
from ember.runtime.ir import Program, print_program
from helpers import compile_and_load

pytest.importorskip("ember.aot")
pytest.importorskip("ember.frontend")

GOLDEN = Path(__file__).parent / "attention_golden"
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}

# The rule each case fires, in float32 (no casts) and in bfloat16/float16 (casts)
RULE_OF_CASE = {
    "sdpa_math": ("sdpa_math", "sdpa_math_upcast"),
    "sdpa_math_mask": ("sdpa_math_mask", "sdpa_math_upcast_mask"),
    "sdpa_math_causal": ("sdpa_math_mask", "sdpa_math_upcast_mask"),
}


def rule_of(case: str, dtype: torch.dtype) -> str:
    return RULE_OF_CASE[case][dtype != torch.float32]


def printed(case: str, dtype: str) -> str:
    """The case's program before and after the rewrite (then DCE), as golden text."""
    fn, inputs = MATH_CASES[case]
    program = math_program(fn, *inputs(DTYPES[dtype]))
    after = dead_code_elimination(attention_to_sdpa(program))
    return f"{print_program(program)}\n---- after attention_to_sdpa, dead_code_elimination\n\n" \
           f"{print_program(after)}"


def rewritten(program: Program, capsys: pytest.CaptureFixture[str]) -> tuple[Program, str]:
    with patch(logs="patterns"):
        result = attention_to_sdpa(program)
    return result, capsys.readouterr().err


def test_every_math_rule_has_a_case() -> None:
    math_rules = {r.name for r in ATTENTION_PATTERNS if r.kind != "written"}
    assert {rule for rules in RULE_OF_CASE.values() for rule in rules} == math_rules
    assert sorted(RULE_OF_CASE) == sorted(MATH_CASES)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("case", sorted(MATH_CASES))
def test_printed_before_and_after(case: str, dtype: str) -> None:
    assert printed(case, dtype) == (GOLDEN / f"{case}_{dtype}.txt").read_text()


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("case", sorted(MATH_CASES))
def test_compiled_matches_eager(case: str, dtype: str, capsys: pytest.CaptureFixture[str]) -> None:
    fn, make_inputs = MATH_CASES[case]
    inputs = make_inputs(DTYPES[dtype])
    with patch(logs="patterns"):
        compiled, run = compile_and_load(math_program(fn, *inputs))
    log = capsys.readouterr().err
    assert compiled.metadata["rewrites"] == {"attention": 1}, log
    assert f"attention: {rule_of(case, DTYPES[dtype])}" in log
    wrapper = compiled.files["forward/wrapper.py"].decode()
    assert "_scaled_dot_product_flash_attention_for_cpu" in wrapper
    assert "bmm" not in wrapper and "any" not in wrapper
    # no float32 buffer left (an extern result's dtype check may name its float32 logsumexp)
    assert "dtype=torch.float32" not in wrapper or dtype == "f32"
    (out,) = run(*inputs)
    # NOTE: the math path rounds the float32 result once to bf16/f16, as SDPA does; the
    # two differ by float32 rounding before that (the scale applied elsewhere)
    tol = {"f32": 1e-5, "bf16": 1e-2, "f16": 2e-3}[dtype]
    torch.testing.assert_close(out, fn(*inputs), atol=tol, rtol=tol)
    q, k, v = inputs[:3]
    mask = inputs[3] if len(inputs) > 3 else None
    causal = case == "sdpa_math_causal"
    eager_sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                scale=None if causal else 0.125)
    torch.testing.assert_close(out, eager_sdpa, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_fully_masked_rows_stay_zero(dtype: str) -> None:
    """``_safe_softmax`` gives 0 for a row masked everywhere; so does SDPA's kernel."""
    q, k, v = qkv(DTYPES[dtype])
    mask = torch.randn(3, 5).to(DTYPES[dtype])
    mask[1] = float("-inf")
    mask[2, :3] = float("-inf")
    expected = sdpa_math_mask(q, k, v, mask)
    assert torch.equal(expected[:, :, 1], torch.zeros_like(expected[:, :, 1]))
    compiled, run = compile_and_load(math_program(sdpa_math_mask, q, k, v, mask))
    assert compiled.metadata["rewrites"] == {"attention": 1}
    (out,) = run(q, k, v, mask)
    assert torch.equal(out[:, :, 1], torch.zeros_like(out[:, :, 1]))
    tol = {"f32": 1e-5, "bf16": 1e-2, "f16": 2e-3}[dtype]
    torch.testing.assert_close(out, expected, atol=tol, rtol=tol)


# -- provenance: only SDPA's own upcast is given back to SDPA --------------------------


def handwritten_upcast(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       mask: torch.Tensor) -> torch.Tensor:
    """SDPA's math path written out by hand: the same ops, asking for float32 math."""
    f = 0.125 ** 0.5
    s = (q.float() * f) @ (k.float().transpose(-2, -1) * f) + mask
    p = torch.ops.aten._safe_softmax.default(s, -1)
    out: torch.Tensor = (p @ v.float()).to(q.dtype)
    return out


def handwritten_upcast_unmasked(q: torch.Tensor, k: torch.Tensor,
                                v: torch.Tensor) -> torch.Tensor:
    f = 0.125 ** 0.5
    s = (q.float() * f) @ (k.float().transpose(-2, -1) * f)
    out: torch.Tensor = (torch.ops.aten._safe_softmax.default(s, -1) @ v.float()).to(q.dtype)
    return out


def captured(fn, *inputs) -> Program:  # type: ignore[no-untyped-def]
    """``fn`` through capture and the aot stage, with its recorded source lines."""
    from ember.aot.stage import AotStage
    from ember.frontend import capture

    return AotStage().run(capture(fn, *inputs), {})


def test_a_handwritten_upcast_is_not_rewritten(capsys: pytest.CaptureFixture[str]) -> None:
    inputs = (*qkv(torch.bfloat16), padding_mask(torch.bfloat16))
    program = captured(handwritten_upcast, *inputs)
    result, log = rewritten(program, capsys)
    assert result is program and "rewrites" not in result.metadata
    assert "sdpa_math_upcast_mask at %_to_copy_3" in log
    assert "test_attention_rewrite_sdpa_math.py:" in log
    assert "not a call of scaled_dot_product_attention (an upcast written by hand asks " \
           "for float32 precision)" in log
    # the same ops recorded from a line calling SDPA are SDPA's math path
    result, _ = rewritten(core_program(handwritten_upcast, *inputs, source=SDPA_LINE), capsys)
    assert result.metadata["rewrites"] == {"attention": 1}


def test_a_handwritten_upcast_keeps_float32(capsys: pytest.CaptureFixture[str]) -> None:
    """Without a mask the float32 ``sdpa_math`` rule fires inside the casts: a float32
    SDPA over the float32 copies, the precision the code asked for."""
    inputs = qkv(torch.bfloat16)
    result, log = rewritten(captured(handwritten_upcast_unmasked, *inputs), capsys)
    assert "attention: sdpa_math at %view_5" in log
    text = print_program(dead_code_elimination(result))
    assert "f32[1, 2, 3, 4]{24,12,4,1} cpu, f32[1, 2, 3]{6,1,2} cpu) = aten::_scaled_dot_" \
           "product_flash_attention_for_cpu.default(%_to_copy, %_to_copy_1, %_to_copy_2, " \
           "scale=0.125)" in text
    _, run = compile_and_load(captured(handwritten_upcast_unmasked, *inputs))
    torch.testing.assert_close(run(*inputs)[0], handwritten_upcast_unmasked(*inputs),
                               atol=1e-2, rtol=1e-2)


def test_the_math_path_without_source_lines_is_not_rewritten(
        capsys: pytest.CaptureFixture[str]) -> None:
    inputs = (*qkv(torch.bfloat16), padding_mask(torch.bfloat16))
    program = core_program(sdpa_math_mask, *inputs)
    result, log = rewritten(program, capsys)
    assert result is program
    assert "%_to_copy_4 has no source line, not a call of scaled_dot_product_attention" in log


def test_a_float32_lookalike_needs_no_provenance(capsys: pytest.CaptureFixture[str]) -> None:
    """In float32 there are no casts: the ``math`` rules keep the dtype, like the rules
    for hand-written attention."""
    inputs = (*qkv(), padding_mask(torch.float32))
    result, log = rewritten(captured(handwritten_upcast, *inputs), capsys)
    assert result.metadata["rewrites"] == {"attention": 1}
    assert "attention: sdpa_math_mask at %view_5" in log


def test_a_float32_mask_of_bfloat16_inputs_stays_float32(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SDPA's math path adds a float32 mask in float32: a bfloat16 SDPA would round it,
    so only the float32 ``sdpa_math_mask`` rule fires, over the float32 copies."""
    inputs = (*qkv(torch.bfloat16), padding_mask(torch.float32))
    result, log = rewritten(math_program(sdpa_math_mask, *inputs), capsys)
    assert "sdpa_math_upcast_mask at %_to_copy_4 (model.py:7 in forward: out = F.scaled_dot_" \
           "product_attention(q, k, v, attn_mask=mask)) not rewritten: a torch.float32 mask " \
           "that is not causal: SDPA over torch.bfloat16 inputs would round it to " \
           "torch.bfloat16" in log
    assert "attention: sdpa_math_mask at %view_5" in log
    assert "_scaled_dot_product_flash_attention_for_cpu.default(%_to_copy, %_to_copy_1, " \
           "%_to_copy_2, attn_mask=%mask, scale=0.125)" in print_program(result)


def test_training_programs_are_not_rewritten(capsys: pytest.CaptureFixture[str]) -> None:
    q, k, v = qkv(torch.bfloat16)
    program = math_program(sdpa_math, q.requires_grad_(), k, v)
    assert "backward" in program.graphs
    result, log = rewritten(program, capsys)
    assert result is program
    assert "attention: training program, not rewritten" in log


def test_the_scale_is_the_one_sdpa_was_given() -> None:
    for scale in (0.125, 0.5, 1.0, 0.1, 3.0):
        root = math.sqrt(scale)
        assert _math_scale(root * root) == scale
    # 17 digits: a neighbour with the same square root may come first; it scales alike
    root = math.sqrt(1 / math.sqrt(96))
    assert math.sqrt(_math_scale(root * root)) == root
    assert _math_scale(0.5 * 0.3) == 0.5 * 0.3  # not a square root's square: unchanged


if __name__ == "__main__":
    GOLDEN.mkdir(exist_ok=True)
    for name in sorted(MATH_CASES):
        for dt in ("f32", "bf16"):
            (GOLDEN / f"{name}_{dt}.txt").write_text(printed(name, dt))
            print(f"wrote {GOLDEN / name}_{dt}.txt")
