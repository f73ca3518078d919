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
    # SDPA's math path has cases of its own (test_attention_rewrite_sdpa_math.py)
    written = sorted(r.name for r in ATTENTION_PATTERNS if r.kind == "written")
    assert sorted(set(RULE_OF_CASE.values())) == written
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


def test_symbolic_sizes_are_rewritten() -> None:
    from ember.aot.stage import AotStage
    from ember.frontend import capture

    fn = CASES["scale_after"][0]
    dims = {"q": {0: ("b", 2, None), 2: ("l", 2, None)},
            "k": {0: ("b", 2, None), 2: ("s", 2, None)},
            "v": {0: ("b", 2, None), 2: ("s", 2, None)}}
    shapes = [(3, 6, 7), (2, 5, 9)]
    example = [torch.randn(b, 2, n, 4) for b, n in ((3, 6), (3, 7), (3, 7))]
    program = AotStage().run(capture(fn, *example, dynamic_shapes=dims), {})
    text = print_program(dead_code_elimination(attention_to_sdpa(program)))
    assert ("%_scaled_dot_product_flash_attention_for_cpu: (f32[s4, 2, s1, 4]{8*s1,4*s1,4,1} "
            "cpu, f32[s4, 2, s1]{2*s1,1,2} cpu) = aten::_scaled_dot_product_flash_attention_"
            "for_cpu.default(%q, %k, %v, scale=0.5)") in text
    assert "aten::bmm" not in text
    _, run = compile_and_load(program)
    for b, lq, lk in shapes:
        q, k, v = torch.randn(b, 2, lq, 4), torch.randn(b, 2, lk, 4), torch.randn(b, 2, lk, 4)
        torch.testing.assert_close(run(q, k, v)[0], fn(q, k, v), atol=1e-5, rtol=1e-5)


if __name__ == "__main__":
    GOLDEN.mkdir(exist_ok=True)
    for name in sorted(CASES):
        (GOLDEN / f"{name}.txt").write_text(printed(name))
        print(f"wrote {GOLDEN / name}.txt")
