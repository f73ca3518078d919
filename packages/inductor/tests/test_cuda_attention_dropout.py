"""Attention with dropout on a CUDA GPU: hand-written attention with ``F.dropout`` on its
probabilities trains through SDPA with ``dropout_p`` (flash or memory-efficient
attention), and what it computes is dropout: with ``v`` the identity the output *is* the
dropped probabilities, so the fraction zeroed, the survivors' scale and the gradients
(recomputed from the mask the output shows) can be checked exactly. Skipped without
CUDA; run on the H200 test machine (``bash tools/gpu/h200_all.sh tests``)."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from attention_cases import CUDA_FUSED_ATTENTION, core_program
from attention_dropout_cases import DROPOUT_CASES
from ember.runtime.config import patch

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]

P = 0.1
B, H, L = 2, 4, 64  # head dim L: v is the [L, L] identity


class DropoutAttention(torch.nn.Module):
    """HF eager attention's form: softmax, dropout in training, ``@ v``."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), -1)
        return F.dropout(probs, P, training=self.training) @ v


def _inputs(dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    q, k = (torch.randn(B, H, L, L, generator=g) for _ in range(2))
    v = torch.eye(L).expand(B, H, L, L).contiguous()
    return [t.to(dtype).cuda().requires_grad_() for t in (q, k, v)]


def _compiled(dtype: torch.dtype, capsys: pytest.CaptureFixture[str]) -> tuple[object, list[torch.Tensor]]:
    from ember.frontend import capture
    from ember.runtime.ir import print_program
    from ember.runtime.pipeline import compile_program

    qkv = _inputs(dtype)
    with patch(logs="patterns", program_cache=False):
        compiled = compile_program(capture(DropoutAttention(), *qkv), "inductor")
    err = capsys.readouterr().err
    assert f"attention: attention with dropout p={P} at" in err, err
    assert compiled.program.metadata["rewrites"] == {"attention": 1}
    text = print_program(compiled.program)
    forward, _, backward = text.partition("graph backward(")
    fused = "|".join(CUDA_FUSED_ATTENTION)
    assert re.search(rf"= aten::({fused})\.default\(%\w+, %\w+, %\w+, (None, )?((True|False), )?"
                     rf"{P}\b", forward), forward
    assert "_attention_backward.default(" in backward, backward
    for gone in ("_softmax", "native_dropout", "bernoulli"):
        assert gone not in text, gone
    return compiled, qkv


def _run(compiled: object, qkv: list[torch.Tensor]) -> torch.Tensor:
    out = compiled(qkv)  # type: ignore[operator]
    result: torch.Tensor = out[0] if isinstance(out, (list, tuple)) else out
    return result


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_attention_with_dropout_trains_through_fused_sdpa(
        dtype: torch.dtype, capsys: pytest.CaptureFixture[str]) -> None:
    compiled, qkv = _compiled(dtype, capsys)
    q, k, _ = qkv
    probs = torch.softmax(q.double() @ k.double().mT / math.sqrt(L), -1)
    tol = 2e-2 if dtype == torch.bfloat16 else 2e-3

    out = _run(compiled, qkv)  # v = I: out is the dropped probabilities
    assert out.shape == (B, H, L, L) and out.dtype == dtype and out.isfinite().all()
    kept = out != 0
    dropped = 1 - kept.double().mean().item()
    # 32768 probabilities: the standard deviation of the fraction is 0.0017
    assert abs(dropped - P) < 0.012, dropped
    torch.testing.assert_close(out.double()[kept], (probs / (1 - P))[kept], rtol=tol, atol=1e-3)
    assert not torch.equal(kept, _run(compiled, qkv) != 0)  # a fresh mask each call

    # gradients through the mask the forward drew (the backward replays it)
    g = torch.randn(B, H, L, L, device="cuda", generator=torch.Generator("cuda").manual_seed(2))
    for t in qkv:
        t.grad = None
    out = _run(compiled, qkv)
    loss: torch.Tensor = (out.float() * g).sum()
    loss.backward()
    d = out.detach().double()
    mask = (d != 0).double() / (1 - P)
    grad_probs = g.double() * mask  # d(out)/d(probs) with v = I
    grad_scores = probs * (grad_probs - (grad_probs * probs).sum(-1, keepdim=True))
    want = {"q": grad_scores @ k.double() / math.sqrt(L),
            "k": grad_scores.mT @ q.double() / math.sqrt(L),
            "v": d.mT @ g.double()}
    for name, t in zip("qkv", qkv):
        assert t.grad is not None and t.grad.isfinite().all(), name
        scale = want[name].abs().max().item()
        torch.testing.assert_close(t.grad.double(), want[name], rtol=tol, atol=tol * scale,
                                   msg=f"the gradient of {name}")


def test_the_mean_over_many_calls_is_the_probabilities(capsys: pytest.CaptureFixture[str]) -> None:
    compiled, qkv = _compiled(torch.float32, capsys)
    q, k, _ = qkv
    probs = torch.softmax(q.double() @ k.double().mT / math.sqrt(L), -1)
    with torch.no_grad():
        mean = sum(_run(compiled, qkv).double() for _ in range(32)) / 32
    assert isinstance(mean, torch.Tensor)
    # dropout is unbiased: E[out] = probs; the row sums average to 1
    assert abs(mean.mean().item() / probs.mean().item() - 1) < 0.01
    assert (mean.sum(-1) - 1).abs().mean().item() < 0.03


@pytest.mark.parametrize("case", sorted(DROPOUT_CASES))
def test_each_case_is_rewritten_by_torchs_own_choice(case: str) -> None:
    """The cases of the CPU tests, captured on the GPU (F.dropout records torch's fused
    ``native_dropout`` here) and rewritten with SDPA as torch's CUDA build picks it."""
    from ember.inductor.passes import attention_to_sdpa

    (fn, _), dtype, _ = DROPOUT_CASES[case]
    g = torch.Generator().manual_seed(4)
    inputs = [torch.randn(B, H, L, L, generator=g).to(dtype).cuda() for _ in range(3)]
    if case == "dropout_additive":
        mask = torch.zeros(1, 1, 1, L)
        mask[..., -8:] = torch.finfo(dtype).min
        inputs.append(mask.to(dtype).cuda())
    result = attention_to_sdpa(core_program(fn, *inputs))
    assert result.metadata.get("rewrites") == {"attention": 1}


def test_hf_bert_trains_with_attention_dropout(capsys: pytest.CaptureFixture[str]) -> None:
    """HF BERT with eager attention and ``attention_probs_dropout_prob``: every layer's
    attention becomes SDPA with ``dropout_p``; a training step runs."""
    transformers = pytest.importorskip("transformers")
    import ember.frontend as ef

    torch.manual_seed(0)
    config = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=256,
        vocab_size=512, max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=P)
    model = transformers.BertModel(config).cuda().train()
    model.set_attn_implementation("eager")
    ids = torch.randint(0, 512, (2, 64), device="cuda")
    with patch(logs="patterns", program_cache=False, capture_cache=False):
        compiled = ef.compile(lambda x: model(input_ids=x).last_hidden_state)
        out = compiled(ids)
    err = capsys.readouterr().err
    assert err.count(f"with dropout p={P} at") == 2, err
    out.float().square().mean().backward()
    assert out.isfinite().all()
    # NOTE: not the pooler's: last_hidden_state does not read it
    grads = {n: p.grad for n, p in model.named_parameters() if not n.startswith("pooler.")}
    assert all(g is not None and g.isfinite().all() for g in grads.values()), \
        [n for n, g in grads.items() if g is None or not g.isfinite().all()]
