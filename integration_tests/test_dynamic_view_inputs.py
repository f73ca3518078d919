"""Inputs that are views into a larger tensor (heads of a fused qkv projection) under
automatic dynamic shapes (issue #15, docs/dynamic-shapes.md): their sizes become symbols
and their strides expressions of them, so a batch or sequence sweep compiles once per
newly dynamic dimension instead of once per size; numerics match eager."""

from __future__ import annotations

import ember.frontend
import pytest
import torch
from ember.runtime.config import patch


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = torch.softmax(q @ k.transpose(-1, -2), -1)
    return scores @ v + q.sum(-1, keepdim=True)


def heads(batch: int, seq: int) -> tuple[torch.Tensor, ...]:
    qkv = torch.randn(batch, seq, 96)
    return qkv[..., :32], qkv[..., 32:64], qkv[..., 64:]


@pytest.mark.parametrize("capture", ["strict", "trace"])
def test_a_batch_then_sequence_sweep_of_qkv_heads_compiles_three_times(
        capture: str, capsys: pytest.CaptureFixture[str]) -> None:
    fast = ember.frontend.compile(attend, options={"capture": capture})  # dynamic=None
    with patch(logs=frozenset({"guards"})):
        for batch in range(2, 9):
            args = heads(batch, 8)
            torch.testing.assert_close(fast(*args), attend(*args), msg=f"batch {batch}")
        assert fast.stats.compiles == 2  # batch 2 static, then s0
        for batch, seq in ((3, 5), (5, 6), (2, 9), (7, 3)):
            args = heads(batch, seq)
            torch.testing.assert_close(fast(*args), attend(*args), msg=f"{batch}x{seq}")
    assert fast.stats.compiles == 3  # the sequence dimension, once
    err = capsys.readouterr().err
    assert "q.stride() == (96 * q.size(1), 96, 1)" in err, err
    assert "k.storage_offset() == 32" in err, err


def test_a_call_whose_strides_differ_is_a_recompile_not_a_wrong_result() -> None:
    fast = ember.frontend.compile(attend, dynamic=True)
    args = heads(3, 4)
    torch.testing.assert_close(fast(*args), attend(*args))
    dense = tuple(a.contiguous() for a in heads(5, 6))
    torch.testing.assert_close(fast(*dense), attend(*dense))
    assert fast.stats.compiles == 2
    args = heads(6, 7)
    torch.testing.assert_close(fast(*args), attend(*args))
    assert fast.stats.compiles == 2


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_qkv_heads_on_cuda_compile_twice_for_a_batch_sweep() -> None:
    fast = ember.frontend.compile(attend)
    for batch in (2, 3, 5, 8):
        qkv = torch.randn(batch, 16, 96, device="cuda")
        args = qkv[..., :32], qkv[..., 32:64], qkv[..., 64:]
        torch.testing.assert_close(fast(*args), attend(*args), msg=f"batch {batch}")
    assert fast.stats.compiles == 2
