"""``tools/bench_generate.py``: its configurations, one eager ``generate`` of the tiny
model, token comparison, the table and the issue's targets (compilers faked: fast)."""

from __future__ import annotations

import dataclasses
from typing import Any

import bench_generate
import pytest
import torch
from benchlib import compilers, generate

CPU = torch.device("cpu")
SHORT = dataclasses.replace(generate.TINY, new_tokens=4)


def test_defaults_are_the_issue_config_and_cpu_is_tiny() -> None:
    args = bench_generate.parse_args(["--device", "cpu"])
    assert args.config == generate.GenerateConfig(
        layers=12, hidden=768, heads=None, vocab=50257, batch=4, prompt=32, new_tokens=128)
    assert args.config.head_count == 12 and args.torch_dtype == torch.float32
    tiny = bench_generate.parse_args(["--cpu", "--new-tokens", "5", "--no-cache"])
    assert tiny.device == "cpu" and tiny.config == dataclasses.replace(
        generate.TINY, new_tokens=5, use_cache=False)
    assert bench_generate.parse_args(["--cpu", "--compilers", "ember,eager"]).compiler_list == [
        "eager", "ember"]
    for bad in (["--compilers", "jax"], ["--batch", "0"], ["--dtype", "int8"]):
        with pytest.raises(SystemExit):
            bench_generate.parse_args(["--cpu", *bad])


def test_eager_generates_exactly_the_new_tokens_and_matches_itself() -> None:
    model = generate.build_model(SHORT, CPU, torch.float32)
    ids = generate.prompt_ids(SHORT, CPU)
    row, out = generate.run_compiler("eager", model, ids, SHORT, None)
    assert row.error == "" and out is not None and out.shape == (2, 8 + 4)
    assert torch.equal(out[:, :8], ids)
    again, _ = generate.run_compiler("eager", model, ids, SHORT, out)
    assert (again.tokens_equal, again.tokens) == (8, 8)
    assert generate.cells(again, SHORT)[-1] == "yes"


def test_wrong_tokens_are_counted_and_failures_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    model = generate.build_model(SHORT, CPU, torch.float32)
    ids = generate.prompt_ids(SHORT, CPU)
    _, reference = generate.run_compiler("eager", model, ids, SHORT, None)

    def argmax_of_the_wrong_token(compiler: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        def compiled(*a: Any, **k: Any) -> Any:
            out = fn(*a, **k)
            out.logits[..., 7] = 1e9  # every new token becomes 7
            return out

        return compiled

    monkeypatch.setattr(compilers, "compile_fn", argmax_of_the_wrong_token)
    row, _ = generate.run_compiler("ember", model, ids, SHORT, reference)
    assert reference is not None
    expected = int((reference[:, 8:] == 7).sum())
    assert (row.tokens_equal, row.tokens) == (expected, 8)
    assert generate.cells(row, SHORT)[-1] == f"{expected}/8"

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("no\nsecond line")

    monkeypatch.setattr(compilers, "compile_fn", broken)
    row, out = generate.run_compiler("ember", model, ids, SHORT, reference)
    assert out is None and row.error == "NotImplementedError: no"
    text = generate.table([row], SHORT)
    assert text.splitlines()[2].split() == ["ember[inductor]", "FAILED"]
    assert text.splitlines()[-1] == "  ember[inductor]: NotImplementedError: no"


def test_table_and_targets() -> None:
    rows = [
        generate.GenerateRow("eager", "eager", 1.3, 1.24, tokens_equal=512, tokens=512),
        generate.GenerateRow("torch", "torch", 61.0, 0.88, compiles=3, graph_breaks=0,
                             tokens_equal=512, tokens=512),
        generate.GenerateRow("ember", "ember[inductor]", 57.0, 1.52, compiles=8, graph_breaks=0,
                             eager_fallback_calls=240, recompile_limit_hit=True,
                             tokens_equal=500, tokens=512),
    ]
    config = generate.GenerateConfig()
    lines = generate.table(rows, config, markdown=True).splitlines()
    assert lines[2] == "| eager | 1.30s | 1.24s | 413 | - | - | - | - | yes |"
    assert lines[4] == "| ember[inductor] | 57.00s | 1.52s | 337 | 8 | 0 | 240 | yes | 500/512 |"
    assert generate.verdict(rows) == [
        "first generate: Ember < torch.compile: met (57.00s against 61.00s)",
        "second generate: Ember < eager: NOT met (1.52s against 1.24s)",
        "second generate: Ember < torch: NOT met (1.52s against 0.88s)",
    ]
    assert generate.verdict(rows[:2]) == []
