"""The attention rewrite's refusals (near misses that must not fire), its log lines and
its count in the program's metadata; the pattern toolkit on small graphs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from attention_cases import core_program, keep_mask, qkv
from ember.inductor.passes import attention_to_sdpa
from ember.inductor.passes.pattern_match import LAST_DIM, Const, Matcher, Op, Scaled, Var
from ember.runtime.config import patch
from ember.runtime.ir import ValueRef, print_program
from helpers import trace

pytest.importorskip("ember.aot")
pytest.importorskip("ember.frontend")


def rewrites(program: object) -> object:
    assert hasattr(program, "metadata")
    return program.metadata.get("rewrites")


def refused(fn, *inputs, capsys: pytest.CaptureFixture[str]) -> str:  # type: ignore[no-untyped-def]
    """Assert that nothing in ``fn``'s program is rewritten; the patterns log."""
    program = core_program(fn, *inputs)
    with patch(logs="patterns"):
        result = attention_to_sdpa(program)
    assert result is program and rewrites(result) is None
    assert "_scaled_dot_product" not in print_program(result)
    return capsys.readouterr().err


# -- near misses ------------------------------------------------------------------------


def test_softmax_over_another_dim_is_not_attention(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        p = torch.softmax(q @ k.transpose(-2, -1) * 0.5, dim=-2)
        return p @ v.transpose(-2, -1).transpose(-2, -1)

    assert refused(fn, *qkv(), capsys=capsys) == ""


def test_scores_read_twice_are_not_rewritten(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        masked = (q @ k.transpose(-2, -1) * 0.5).masked_fill(~keep, float("-inf"))
        return torch.softmax(masked, -1) @ v, masked.amax(-1)

    err = refused(fn, *qkv(), keep_mask(), capsys=capsys)
    assert "masked_fill at %view_5 not rewritten: %where is also read by %amax" in err


def test_probabilities_returned_are_not_rewritten(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor,
           v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = torch.softmax(q @ k.transpose(-2, -1), -1)
        return p @ v, p

    err = refused(fn, *qkv(), capsys=capsys)
    assert "is also read by a graph output" in err


def test_scale_from_an_input_is_not_a_constant(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-2, -1) * t, -1) @ v

    refused(fn, *qkv(), torch.tensor(0.5), capsys=capsys)


def test_upcast_softmax_around_bf16_matmuls_is_not_sdpa(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = q @ k.transpose(-2, -1) * 0.5
        return torch.softmax(s.float(), -1).to(torch.bfloat16) @ v

    refused(fn, *qkv(torch.bfloat16), capsys=capsys)


def test_float32_softmax_of_bf16_scores_is_not_sdpa(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        p = torch.softmax(q @ k.transpose(-2, -1), -1, dtype=torch.float32)
        return p @ v.float()

    refused(fn, *qkv(torch.bfloat16), capsys=capsys)


def test_a_finite_fill_is_not_a_mask(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        s = (q @ k.transpose(-2, -1)).masked_fill(~keep, -10000.0)
        return torch.softmax(s, -1) @ v

    err = refused(fn, *qkv(), keep_mask(), capsys=capsys)
    assert "the mask fills -10000.0, not -inf or finfo(torch.float32).min" in err


def test_float16_finfo_min_fill_is_not_a_mask(capsys: pytest.CaptureFixture[str]) -> None:
    # finfo(float16).min is -65504, one ulp is 32: scores + fill != fill
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        s = torch.where(keep, q @ k.transpose(-2, -1), torch.finfo(torch.float16).min)
        return torch.softmax(s, -1) @ v

    err = refused(fn, *qkv(torch.float16), keep_mask(), capsys=capsys)
    assert "not -inf or finfo(torch.float16).min" in err


def test_an_additive_mask_of_another_dtype_is_not_rewritten(
        capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-2, -1) + m, -1).to(q.dtype) @ v

    refused(fn, *qkv(torch.bfloat16), torch.randn(3, 5), capsys=capsys)


def test_a_number_added_to_the_scores_is_no_mask(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-2, -1) + 1.0, -1) @ v

    assert "not rewritten: the mask is the number 1.0" in refused(fn, *qkv(), capsys=capsys)


def test_training_programs_are_not_rewritten(capsys: pytest.CaptureFixture[str]) -> None:
    q, k, v = qkv()
    program = core_program(lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), -1) @ v,
                           q.requires_grad_(), k, v)
    assert "backward" in program.graphs
    with patch(logs="patterns"):
        assert attention_to_sdpa(program) is program
    assert "attention: training program, not rewritten" in capsys.readouterr().err


# -- what fires: count and log ----------------------------------------------------------


def test_each_rewrite_is_counted_and_logged_with_its_source_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    from ember.aot.stage import AotStage
    from ember.frontend import capture

    def two_layers(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   keep: torch.Tensor) -> torch.Tensor:
        a = torch.softmax((q @ k.transpose(-2, -1)).masked_fill(~keep, float("-inf")), -1) @ v
        return torch.softmax((a @ k.transpose(-2, -1)).masked_fill(~keep, float("-inf")), -1) @ v

    program = AotStage().run(capture(two_layers, *qkv(), keep_mask()), {})
    with patch(logs="patterns"):
        result = attention_to_sdpa(program)
    assert rewrites(result) == {"attention": 2}
    lines = [x for x in capsys.readouterr().err.splitlines() if "->" in x]
    assert len(lines) == 2
    assert all("attention: masked_fill at %view_" in x for x in lines)
    assert all("test_attention_rewrite_checks.py:" in x for x in lines)
    assert "torch.softmax((q @ k.transpose(-2, -1))" in lines[0]
    assert "torch.softmax((a @ k.transpose(-2, -1))" in lines[1]
    # the shared mask stays one value, read by both attention calls
    text = print_program(result)
    assert text.count("aten::_scaled_dot_product_flash_attention_for_cpu.default(") == 2
    assert text.count("aten::bitwise_not.default(%keep)") == 1


def test_a_float16_finfo_min_fill_of_a_causal_mask_is_is_causal() -> None:
    from attention_cases import causal_triu

    result = attention_to_sdpa(core_program(causal_triu, *qkv(torch.float16)))
    assert rewrites(result) == {"attention": 1}
    assert "(%q, %k, %v, 0.0, True, scale=0.5)" in print_program(result)


def test_an_earlier_count_is_added_to() -> None:
    program = core_program(lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), -1) @ v,
                           *qkv())
    program.metadata["rewrites"] = {"attention": 3, "other": 1}
    assert rewrites(attention_to_sdpa(program)) == {"attention": 4, "other": 1}


# -- the toolkit ------------------------------------------------------------------------


def test_scaled_multiplies_every_factor_and_var_binds_one_value() -> None:
    program = trace(lambda x, y: ((x * 2.0) / 8.0) + ((x * 2.0) / 8.0),
                    [torch.randn(3), torch.randn(3)])
    graph = program.graphs["forward"]
    matcher = Matcher(graph)
    add = next(n for n in graph.nodes if n.target == "aten::add.Tensor")
    same = Op(("aten::add.Tensor",), (Scaled(Var("x"), "s"), Scaled(Var("x"), "t")))
    match = matcher.match_at(add, same)
    assert match is not None
    assert match.bindings == {"x": ValueRef("in0"), "s": 0.25, "t": 0.25}
    assert match.covered == ["add", "div", "mul", "div_1", "mul_1"]
    different = Op(("aten::add.Tensor",), (Scaled(Var("x"), "s"), Var("x")))
    assert matcher.match_at(add, different) is None


def test_commutative_ops_and_last_dim_and_constants() -> None:
    program = trace(lambda x: torch.softmax(torch.ops.aten.full.default([], 2.5) + x, dim=1),
                    [torch.randn(2, 3)])
    graph = program.graphs["forward"]
    softmax = next(n for n in graph.nodes if n.target == "aten::_softmax.default")
    inner = Op(("aten::add.Tensor",), (Var("x"), Const("c")), commutative=True)
    plain = Op(("aten::add.Tensor",), (Var("x"), Const("c")))
    pattern = Op(("aten::_softmax.default",), (inner, LAST_DIM, False))
    match = Matcher(graph).match_at(softmax, pattern)
    assert match is not None and match.bindings == {"x": ValueRef("in0"), "c": 2.5}
    assert Matcher(graph).match_at(
        softmax, Op(("aten::_softmax.default",), (plain, LAST_DIM, False))) is None


def test_single_use_check_names_the_outside_reader() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2.0
        return torch.softmax(y, -1), y + 1.0

    program = trace(fn, [torch.randn(2, 3)])
    graph = program.graphs["forward"]
    softmax = next(n for n in graph.nodes if n.target == "aten::_softmax.default")
    matcher = Matcher(graph)
    match = matcher.match_at(
        softmax, Op(("aten::_softmax.default",), (Scaled(Var("x"), "s"), LAST_DIM, False)))
    assert match is not None and match.number("s") == 2.0
    assert matcher.covered_nodes_single_use(match) == "%mul is also read by %add"
