"""The attention rewrite with dropout on the probabilities (``DROPOUT_FORMS``): printed IR
before and after on CUDA programs (golden files ``attention_golden/dropout_*.txt``,
rewritten by ``python packages/inductor/tests/test_attention_rewrite_dropout.py``), the
CPU (no fused kernel takes dropout: never rewritten), near misses and their log lines,
and the ``attention_dropout`` / ``eager_random`` options."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from attention_cases import core_program, keep_mask, qkv
from attention_dropout_cases import DROPOUT_CASES, cuda_program, cuda_sdpa, native_dropout
from ember.inductor.passes import attention_to_sdpa, dead_code_elimination, pipeline_for
from ember.inductor.passes.attention import attention_pass, dropout_enabled
from ember.inductor.passes.attention_patterns import DROPOUT_FORMS
from ember.runtime.config import patch
from ember.runtime.ir import Program, print_program

pytest.importorskip("ember.aot")
pytest.importorskip("ember.frontend")

GOLDEN = Path(__file__).parent / "attention_golden"
_native_dropout = torch.ops.aten.native_dropout.default


@pytest.fixture(autouse=True)
def _cuda_sdpa(monkeypatch: pytest.MonkeyPatch) -> None:
    """SDPA recorded as torch's CUDA build picks it (``attention_dropout_cases``)."""
    monkeypatch.setattr(F, "scaled_dot_product_attention", cuda_sdpa)


def printed(case: str) -> str:
    """The case's CUDA program before and after the rewrite (then DCE)."""
    (fn, inputs), dtype, _ = DROPOUT_CASES[case]
    program = cuda_program(fn, *inputs(dtype))
    after = dead_code_elimination(attention_to_sdpa(program))
    return f"{print_program(program)}\n---- after attention_to_sdpa, dead_code_elimination\n\n" \
           f"{print_program(after)}"


def test_every_dropout_form_has_a_case() -> None:
    assert {form for _, _, form in DROPOUT_CASES.values()} == {f.name for f in DROPOUT_FORMS}


@pytest.mark.parametrize("case", sorted(DROPOUT_CASES))
def test_printed_before_and_after_on_cuda(case: str) -> None:
    assert printed(case) == (GOLDEN / f"{case}.txt").read_text()


@pytest.mark.parametrize("case", sorted(DROPOUT_CASES))
def test_rewritten_on_cuda_with_dropout_p(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    (fn, inputs), dtype, _ = DROPOUT_CASES[case]
    with patch(logs="patterns"):
        result = attention_to_sdpa(cuda_program(fn, *inputs(dtype)))
    p = 0.25 if case == "dropout_uniform" else 0.1
    assert result.metadata["rewrites"] == {"attention": 1}
    assert f"with dropout p={p} at" in capsys.readouterr().err
    text = print_program(dead_code_elimination(result))
    # flash (q, k, v, dropout_p, ...), efficient (q, k, v, bias, lse, dropout_p, ...)
    fused = rf"_attention\.default\(%q, %k, %v, (%mask, |None, )?((True|False), )?{p}\b"
    assert re.search(fused, text), text
    for gone in ("_softmax", "bernoulli", "native_dropout", "rand_like"):
        assert gone not in text


@pytest.mark.parametrize("case", sorted(DROPOUT_CASES))
def test_never_rewritten_on_the_cpu(case: str, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # torch's own SDPA: its CPU kernel takes no dropout
    (fn, inputs), dtype, _ = DROPOUT_CASES[case]
    program = core_program(fn, *inputs(dtype))
    with patch(logs="patterns"):
        assert attention_to_sdpa(program) is program
    assert ("not rewritten: torch has no fused attention kernel for these inputs (it would "
            "run the same unfused ops; the CPU's takes no dropout)") in capsys.readouterr().err


_MATH = torch.ops.aten._scaled_dot_product_attention_math.default


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("masked", [False, True], ids=["", "mask"])
def test_sdpas_math_path_with_dropout(dtype: torch.dtype, masked: bool,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """SDPA's math path with ``dropout_p`` (what torch records when it picks no fused
    kernel) becomes SDPA with ``dropout_p`` again (the ``sdpa_math*`` rules)."""
    from attention_cases import math_program, padding_mask
    from attention_dropout_cases import on_cuda

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           *mask: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = _MATH(q, k, v, *(mask or (None,)), 0.1, False, None,
                                  scale=0.125)[0]
        return out

    extra = (padding_mask(dtype),) if masked else ()
    with patch(logs="patterns"):
        result = attention_to_sdpa(on_cuda(math_program(fn, *qkv(dtype), *extra)))
    rule = "sdpa_math" + ("_upcast" if dtype == torch.bfloat16 else "") + \
        ("_mask" if masked else "")
    assert f"attention: {rule} with dropout p=0.1 at" in capsys.readouterr().err
    assert result.metadata["rewrites"] == {"attention": 1}


# -- near misses on CUDA: each refused for its own reason -----------------------------


def refused(program: Program, capsys: pytest.CaptureFixture[str], **options: bool) -> str:
    """Assert that nothing in ``program`` is rewritten; the patterns log."""
    with patch(logs="patterns"):
        result = attention_to_sdpa(program, **options)
    assert result is program and "_scaled_dot_product" not in print_program(result)
    return capsys.readouterr().err


def test_dropout_before_the_softmax_is_not_attention_with_dropout(
        capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = native_dropout(q @ k.transpose(-2, -1) * 0.5, 0.1)
        return torch.softmax(scores, -1) @ v

    assert refused(cuda_program(fn, *qkv()), capsys) == ""


def test_dropped_probabilities_read_elsewhere(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor,
           v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dropped = F.dropout(torch.softmax(q @ k.transpose(-2, -1), -1), 0.1, training=True)
        return dropped @ v, dropped

    err = refused(cuda_program(fn, *qkv()), capsys)
    assert "attention at %view_5 not rewritten: %mul is also read by a graph output" in err


def test_the_dropout_mask_read_elsewhere(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor,
           v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dropped, mask = _native_dropout(torch.softmax(q @ k.transpose(-2, -1), -1), 0.1, True)
        return dropped @ v, mask

    err = refused(cuda_program(fn, *qkv()), capsys)
    assert "not rewritten: %native_dropout is also read by a graph output" in err


def test_p_as_a_tensor(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(q @ k.transpose(-2, -1), -1)
        return (probs * (torch.rand_like(probs) > p) / (1 - p)) @ v

    err = refused(cuda_program(fn, *qkv(), torch.tensor(0.1)), capsys)
    assert "not rewritten: the dropout's p is a tensor, not a number" in err


def test_survivors_not_rescaled(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(q @ k.transpose(-2, -1), -1)
        return (probs * (torch.rand_like(probs) > 0.1)) @ v

    err = refused(cuda_program(fn, *qkv()), capsys)
    assert "dropout with p=0.1 scales the kept probabilities by 1.0, not 1/(1 - p)" in err


def test_kept_with_one_probability_scaled_by_another(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(q @ k.transpose(-2, -1), -1)
        return (probs * (torch.empty_like(probs).bernoulli_(0.9) / 0.8)) @ v

    err = refused(cuda_program(fn, *qkv()), capsys)
    assert "dropout keeps with probability 0.9 but scales by 1/0.8, not 1/0.9" in err


def test_a_mask_shared_by_the_rows_is_not_sdpa_dropout(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(q @ k.transpose(-2, -1), -1)
        row = torch.empty(1, 1, 1, probs.size(-1)).bernoulli_(0.9) / 0.9
        return (probs * row) @ v

    err = refused(cuda_program(fn, *qkv()), capsys)
    assert "the dropout mask [1, 1, 1, 5] is not of the probabilities' sizes [1, 2, 3, 5]" in err


def test_a_masked_attention_with_dropout_keeps_its_mask_checks(
        capsys: pytest.CaptureFixture[str]) -> None:
    """float16's ``finfo.min`` does not absorb the scores (attention_masks.py), with or
    without dropout."""
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        scores = (q @ k.transpose(-2, -1)).masked_fill(~keep, torch.finfo(q.dtype).min)
        return native_dropout(torch.softmax(scores, -1), 0.1) @ v

    err = refused(cuda_program(fn, *qkv(torch.float16), keep_mask()), capsys)
    assert "masked_fill at %view_5 not rewritten: the mask fills" in err


# -- options ---------------------------------------------------------------------------


def test_the_option_turns_it_off(capsys: pytest.CaptureFixture[str]) -> None:
    (fn, inputs), dtype, _ = DROPOUT_CASES["dropout_native"]
    program = cuda_program(fn, *inputs(dtype))
    err = refused(program, capsys, dropout=False)
    assert ("attention at %view_5 not rewritten: dropout (p=0.1) on the probabilities: off "
            "(options attention_dropout=False or eager_random)") in err
    # without dropout attention is still rewritten with the option off
    plain = cuda_program(lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), -1) @ v,
                         *qkv(dtype))
    assert attention_to_sdpa(plain, dropout=False).metadata["rewrites"] == {"attention": 1}


def test_options_reach_the_pre_grad_pass_and_the_pipeline() -> None:
    from ember.inductor.stage import InductorStage
    from ember.runtime.pipeline import check_options

    check_options("inductor", {"attention_dropout": False})
    assert dropout_enabled({}) and dropout_enabled({"attention_dropout": True})
    assert not dropout_enabled({"attention_dropout": False})
    assert not dropout_enabled({"eager_random": True})
    assert attention_pass({}) is attention_to_sdpa
    (fn, inputs), dtype, _ = DROPOUT_CASES["dropout_native"]
    (pre_grad,) = InductorStage().pre_grad_passes()
    for options, fires in (({}, True), ({"attention_dropout": False}, False),
                           ({"eager_random": True}, False)):
        run = pre_grad.for_options(options).run
        assert ("rewrites" in run(cuda_program(fn, *inputs(dtype))).metadata) is fires
        (attention,) = [p for name, p in pipeline_for(options) if name == "attention_to_sdpa"]
        assert ("rewrites" in attention(cuda_program(fn, *inputs(dtype))).metadata) is fires


def test_training_on_the_cpu_keeps_the_unfused_dropout(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The pre-grad pass sees ``F.dropout``'s CPU form and refuses it (no fused CPU
    kernel takes dropout): the program trains through Ember's own dropout kernels."""
    monkeypatch.undo()
    from ember.frontend import capture
    from ember.runtime.pipeline import compile_program

    class Attention(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            probs = torch.softmax(q @ k.transpose(-2, -1) * 0.5, -1)
            return F.dropout(probs, 0.1, training=self.training) @ v

    qkv_ = [t.requires_grad_() for t in qkv()]
    with patch(logs="patterns", program_cache=False):
        compiled = compile_program(capture(Attention(), *qkv_), "inductor")
    assert "the CPU's takes no dropout" in capsys.readouterr().err
    assert "rewrites" not in compiled.program.metadata
    (out,) = compiled(qkv_)
    out.sum().backward()
    assert all(t.grad is not None and t.grad.isfinite().all() for t in qkv_)


if __name__ == "__main__":
    F.scaled_dot_product_attention = cuda_sdpa
    for name in sorted(DROPOUT_CASES):
        (GOLDEN / f"{name}.txt").write_text(printed(name))
        print(f"wrote {GOLDEN / name}.txt")
