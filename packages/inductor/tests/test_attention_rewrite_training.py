"""The attention rewrite in training: the aot stage runs it on the forward before it
derives the backward (``InductorStage.pre_grad_passes``), so the backward is SDPA's."""

from __future__ import annotations

import math

import pytest
import torch
from ember.frontend import capture
from ember.runtime.config import patch
from ember.runtime.ir import print_program
from ember.runtime.pipeline import compile_program

EMBER_CACHES_OFF = {"program_cache": False}


class CausalAttention(torch.nn.Module):
    """The zoo's naive_attention: q kᵀ, a tril mask, softmax, @ v."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        seq = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v


def _qkv() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(2, 4, 64, 32, requires_grad=True) for _ in range(3)]


def _grads(fn: object, qkv: list[torch.Tensor]) -> list[torch.Tensor]:
    for x in qkv:
        x.grad = None
    out = fn(qkv) if not isinstance(fn, torch.nn.Module) else fn(*qkv)  # type: ignore[operator]
    out = out[0] if isinstance(out, (list, tuple)) else out
    (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
    return [x.grad.clone() for x in qkv]  # type: ignore[union-attr]


def test_hand_written_attention_trains_through_sdpa(capsys: pytest.CaptureFixture[str]) -> None:
    qkv = _qkv()
    module = CausalAttention()
    with patch(logs="patterns", **EMBER_CACHES_OFF):
        compiled = compile_program(capture(module, *qkv), "inductor")
    log = capsys.readouterr().err
    assert "attention: masked_fill (a causal mask: is_causal=True)" in log
    text = print_program(compiled.program)
    forward, _, backward = text.partition("graph backward(")
    assert "= aten::_scaled_dot_product_flash_attention_for_cpu.default(" in forward
    assert "= aten::_scaled_dot_product_flash_attention_for_cpu_backward.default(" in backward
    assert "_softmax" not in text  # no probabilities saved, none recomputed
    assert compiled.program.metadata["rewrites"] == {"attention": 1}
    for got, want in zip(_grads(compiled, qkv), _grads(module, qkv)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_aot_eager_has_no_later_stage_to_rewrite_for() -> None:
    qkv = _qkv()
    with patch(**EMBER_CACHES_OFF):
        compiled = compile_program(capture(CausalAttention(), *qkv), "aot_eager")
    assert "rewrites" not in compiled.program.metadata
    assert "_softmax" in print_program(compiled.program)


def test_symbolic_sizes_train_through_sdpa_too(capsys: pytest.CaptureFixture[str]) -> None:
    """``dynamic=True``: one compile serves two sequence lengths, forward and backward
    through SDPA (the mask, not a compile-time constant here, is passed as SDPA's)."""
    import ember.frontend as ef

    module = CausalAttention()
    with patch(logs="patterns", program_cache=False, capture_cache=False):
        compiled = ef.compile(module, dynamic=True)
        for seq in (64, 96):
            torch.manual_seed(seq)
            qkv = [torch.randn(2, 4, seq, 32, requires_grad=True) for _ in range(3)]
            got = _grads(lambda xs: compiled(*xs), qkv)
            for a, e in zip(got, _grads(module, qkv)):
                torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
    assert compiled.stats.compiles == 1 and compiled.stats.recompiles == 0
    assert "attention: masked_fill at" in capsys.readouterr().err


def test_the_aot_stage_decomposes_for_the_rewrite_only_with_a_softmax() -> None:
    """``has_softmax`` is the cheap test before the aot stage decomposes a training
    forward for the rewrite: a cross-entropy loss (``log_softmax``) is no attention."""
    import torch.nn.functional as F
    from ember.inductor.passes.attention import has_softmax

    x = torch.randn(4, 10, requires_grad=True)
    labels = torch.tensor([1, 2, 3, 4])
    assert not has_softmax(capture(lambda x: F.cross_entropy(x, labels), x))
    assert has_softmax(capture(lambda x: x.softmax(-1) * 2, x))


class Block(torch.nn.Module):
    """LayerNorm, a qkv projection, hand-written causal attention, an output projection:
    layer norm's statistics (results autograd does not differentiate) and parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(32)
        self.qkv = torch.nn.Linear(32, 96)
        self.proj = torch.nn.Linear(32, 32)
        self.attention = CausalAttention()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.view(2, 16, 4, 8).transpose(1, 2)
                   for t in self.qkv(self.norm(x)).split(32, -1))
        y = self.attention(q, k, v).transpose(1, 2).reshape(2, 16, 32)
        return x + self.proj(y)


def test_a_block_with_parameters_trains_through_sdpa(capsys: pytest.CaptureFixture[str]) -> None:
    import ember.frontend as ef

    torch.manual_seed(0)
    block, x = Block(), torch.randn(2, 16, 32, requires_grad=True)
    reference = Block()
    reference.load_state_dict(block.state_dict())
    with patch(logs="patterns", program_cache=False, capture_cache=False):
        compiled = ef.compile(block)
        compiled(x).square().sum().backward()
    assert "attention: masked_fill (a causal mask: is_causal=True)" in capsys.readouterr().err
    x_ref = x.detach().clone().requires_grad_()
    reference(x_ref).square().sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-4)
    for (name, p), q in zip(block.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)
