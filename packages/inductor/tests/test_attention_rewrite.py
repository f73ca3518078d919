"""The attention rewrite, rule by rule: printed IR before and after (golden files in
``attention_golden/``, rewritten by ``python packages/inductor/tests/test_attention_rewrite.py``)
and the compiled result against eager on the CPU, float32 and bfloat16."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from attention_cases import CASES, core_program
from ember.inductor.passes import attention_to_sdpa, dead_code_elimination
from ember.inductor.passes.attention_patterns import ATTENTION_PATTERNS
from ember.runtime.ir import print_program
from helpers import compile_and_load

pytest.importorskip("ember.aot")
pytest.importorskip("ember.frontend")

GOLDEN = Path(__file__).parent / "attention_golden"

# The rule each case exercises (every rule has at least one case).
RULE_OF_CASE = {
    "scale_after": "attention",
    "scale_before": "attention",
    "additive_mask": "additive_mask",
    "where_mask": "where_mask",
    "masked_fill": "masked_fill",
    "causal_tril": "masked_fill",
    "causal_triu": "masked_fill",
}


def printed(case: str) -> str:
    """The case's program before and after the rewrite (then DCE), as golden text."""
    fn, inputs = CASES[case]
    program = core_program(fn, *inputs(torch.float32))
    after = dead_code_elimination(attention_to_sdpa(program))
    return f"{print_program(program)}\n---- after attention_to_sdpa, dead_code_elimination\n\n" \
           f"{print_program(after)}"


def test_every_rule_has_a_case() -> None:
    assert sorted(set(RULE_OF_CASE.values())) == sorted(r.name for r in ATTENTION_PATTERNS)
    assert sorted(RULE_OF_CASE) == sorted(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_printed_before_and_after(case: str) -> None:
    assert printed(case) == (GOLDEN / f"{case}.txt").read_text()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_matches_eager(case: str, dtype: torch.dtype) -> None:
    fn, make_inputs = CASES[case]
    inputs = make_inputs(dtype)
    compiled, run = compile_and_load(core_program(fn, *inputs))
    assert compiled.metadata["rewrites"] == {"attention": 1}
    assert "_scaled_dot_product_flash_attention_for_cpu" in compiled.files["forward/wrapper.py"].decode()
    (out,) = run(*inputs)
    expected = fn(*inputs)
    # NOTE: bfloat16 eager rounds the scores and the probabilities to bfloat16 between
    # its ops; SDPA keeps them in float32: equal up to bfloat16 rounding.
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out, expected, atol=tol, rtol=tol)


if __name__ == "__main__":
    GOLDEN.mkdir(exist_ok=True)
    for name in sorted(CASES):
        (GOLDEN / f"{name}.txt").write_text(printed(name))
        print(f"wrote {GOLDEN / name}.txt")
