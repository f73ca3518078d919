"""``EMBER_LOGS=partition`` (issue #19 item 5): the min-cut partitioner's choices as a
table: each saved value with its bytes and why it is saved, each recomputed value."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from aot_capture import capture
from ember.aot.config import AotConfig
from ember.aot.pipeline import aot_compile
from ember.runtime.config import patch


def _matmul_gelu(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ w).exp().sum(-1)


def _partition_log(fn: Callable[..., Any], *inputs: torch.Tensor, capsys: pytest.CaptureFixture[str],
                   config: AotConfig | None = None) -> list[str]:
    program = capture(fn, *inputs)
    capsys.readouterr()
    with patch(logs=frozenset({"partition"})), torch.enable_grad():
        aot_compile(program, config or AotConfig(training=True))
    return capsys.readouterr().err.splitlines()


def test_the_log_names_saved_values_their_bytes_and_why(
        capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(8, 16, requires_grad=True)
    w = torch.randn(16, 32, requires_grad=True)
    lines = _partition_log(_matmul_gelu, x, w, capsys=capsys)
    assert lines[:6] == [
        ("[ember.partition] partition: 3 values saved for the backward (3.5 KiB at the size "
        "hints), 16 recomputed"),
        ("  saved       in0        float32[8, 16]     512 B  input                  a forward "
        "input"),
        ("  saved       in1        float32[16, 32]  2.0 KiB  input                  a forward "
        "input"),
        ("  saved       mm         float32[8, 32]   1.0 KiB  aten::mm.default       never "
        "recomputed: compute-bound (matmul, convolution, attention)"),
        "  recomputed  gelu       float32[8, 32]   1.0 KiB  aten::gelu.default",
        "  recomputed  exp        float32[8, 32]   1.0 KiB  aten::exp.default",
    ]
    assert len(lines) == 1 + 3 + 16
    assert all(line.startswith("  recomputed  ") for line in lines[4:])


def test_a_small_reduction_is_saved_by_the_cut(capsys: pytest.CaptureFixture[str]) -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        s = (x * 2).sum(-1, keepdim=True)
        return (s * y).sum()  # the gradient of y reads the sum

    x, y = torch.randn(8, 16, requires_grad=True), torch.randn(8, 16, requires_grad=True)
    lines = _partition_log(f, x, y, capsys=capsys)
    assert lines[0].endswith("2 values saved for the backward (544 B at the size hints), "
                             "0 recomputed")
    assert any(line.split()[:5] == ["saved", "sum", "float32[8,", "1]", "32"]
               and line.endswith("min cut: fewer bytes than saving what it is computed from")
               for line in lines), lines


def test_symbolic_saved_bytes_are_an_expression(capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(8, 16, requires_grad=True)
    w = torch.randn(16, 32, requires_grad=True)
    program = capture(_matmul_gelu, x, w, dynamic={0: {0: (2, None)}})
    capsys.readouterr()
    with patch(logs=frozenset({"partition"})), torch.enable_grad():
        aot_compile(program, AotConfig(training=True))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == ("[ember.partition] partition: 3 values saved for the backward "
                        "(192*s0+2048 bytes: 3.5 KiB at the size hints), 16 recomputed")
    assert lines[1].startswith("  saved       in0        float32[s0, 16]    512 B  input")


def test_save_everything_recomputes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(8, 16, requires_grad=True)
    w = torch.randn(16, 32, requires_grad=True)
    lines = _partition_log(_matmul_gelu, x, w, capsys=capsys,
                           config=AotConfig(training=True, save_everything=True))
    assert lines[0].endswith(", 0 recomputed")
    assert not any(line.lstrip().startswith("recomputed") for line in lines)


def test_silent_without_the_topic(capsys: pytest.CaptureFixture[str]) -> None:
    program = capture(_matmul_gelu, torch.randn(8, 16, requires_grad=True),
                      torch.randn(16, 32, requires_grad=True))
    with patch(logs=frozenset()), torch.enable_grad():
        aot_compile(program, AotConfig(training=True))
    assert "ember.partition" not in capsys.readouterr().err


def test_ops_outside_the_recompute_table_are_saved(capsys: pytest.CaptureFixture[str]) -> None:
    # a sort and an adaptive max pooling (extern calls on some backends) were recomputed in
    # the backward graph: the whole op ran twice per training step (3-d max pooling too,
    # before the inductor lowered it: now it is in the table, recomputed like 2-d pooling)
    def f(x: torch.Tensor) -> torch.Tensor:
        pooled = torch.nn.functional.adaptive_max_pool3d(torch.relu(x), 3)
        return pooled.sort(-1).values.exp().sum() + torch.nn.functional.max_pool3d(x, 2).sum()

    x = torch.randn(1, 2, 4, 4, 4, requires_grad=True)
    lines = _partition_log(f, x, capsys=capsys)
    saved = [line.split()[1] for line in lines if line.startswith("  saved ")]
    recomputed = [line.split()[1] for line in lines if line.startswith("  recomputed ")]
    assert "adaptive_max_pool3d[1]" in saved and "sort[1]" in saved, lines
    assert not any(name.startswith(("adaptive_max_pool3d", "sort")) for name in recomputed)
    assert "max_pool3d_with_indices" in recomputed, lines
    reason = "never recomputed: not pointwise, a view or a cheap op (recompute_rules.py)"
    # adaptive_max_pool3d[1] and sort[1]; sort[0] is not saved: the exp after it is (as
    # many bytes, and its gradient reads it)
    assert sum(line.endswith(reason) for line in lines) == 2, lines
    assert "exp" in saved and "sort[0]" not in saved, lines
    assert "relu" in recomputed  # pointwise work still is


def test_every_recompute_table_entry_is_a_registered_op() -> None:
    from ember.aot.partition.recompute_rules import RECOMPUTABLE

    missing = [name for name in RECOMPUTABLE
               if not hasattr(torch.ops.aten, name.removeprefix("aten::"))]
    assert missing == []
