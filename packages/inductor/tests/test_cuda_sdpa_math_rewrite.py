"""SDPA's own math path rewritten back to SDPA on a CUDA GPU: the math path's cases
(``attention_cases.MATH_CASES``) become a fused kernel (flash, memory-efficient or cuDNN
attention), and a BERT-like self-attention calling ``F.scaled_dot_product_attention``
with a padding mask, compiled by ``ember.frontend.compile`` (the strict capture) in
bfloat16, holds a fused attention op and nothing of ``_safe_softmax`` (no ``any``, no
float32 ``[.., L, S]`` buffer). Skipped without CUDA; run on the H200 test machine:
``.venv/bin/pytest -q -p no:cacheprovider packages/inductor/tests/test_cuda_sdpa_math_rewrite.py``."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))

from attention_cases import CUDA_FUSED_ATTENTION, MATH_CASES, math_program
from ember.runtime.config import patch
from helpers import compile_and_load

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]


def _float32_score_buffers(wrapper: str, length: int) -> list[str]:
    """The wrapper's float32 buffers whose last two sizes are ``[length, length]``."""
    found = []
    for sizes in re.findall(r"_empty\(\(([^)]*)\), \([^)]*\), torch\.float32\)",
                            wrapper):
        dims = [d.strip() for d in sizes.split(",") if d.strip()]
        if dims[-2:] == [str(length), str(length)]:
            found.append(sizes)
    return found


def _safe_softmax_kernels(wrapper: str) -> list[str]:
    return re.findall(r"# kernel\d+: fused from [^\n]*\bany\b[^\n]*", wrapper)


def _inputs(case: str, dtype: torch.dtype, length: int) -> tuple[torch.Tensor, ...]:
    """B=2, H=4, L=S=``length``, D=64; the mask a padding mask [2, 1, 1, S] (the second
    sequence's last quarter padded)."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 4, length, 64, generator=g) for _ in range(3))
    extra: tuple[torch.Tensor, ...] = ()
    if case == "sdpa_math_mask":
        mask = torch.zeros(2, 1, 1, length)
        mask[1, ..., 3 * length // 4:] = torch.finfo(dtype).min
        extra = (mask,)
    return tuple(t.to(dtype).cuda() for t in (q, k, v, *extra))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32],
                         ids=["bf16", "f16", "f32"])
@pytest.mark.parametrize("case", sorted(MATH_CASES))
def test_math_path_becomes_a_fused_kernel(case: str, dtype: torch.dtype,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    fn = MATH_CASES[case][0]
    inputs = _inputs(case, dtype, 128)
    with patch(logs="patterns"):
        compiled, run = compile_and_load(math_program(fn, *inputs))
    log = capsys.readouterr().err
    assert compiled.metadata.get("rewrites") == {"attention": 1}, log
    wrapper = compiled.files["forward/wrapper.py"].decode()
    assert any(op in wrapper for op in CUDA_FUSED_ATTENTION), wrapper
    assert not _safe_softmax_kernels(wrapper) and "bmm" not in wrapper, wrapper
    (out,) = run(*inputs)
    # NOTE: compared with what the user's eager SDPA call runs (a fused kernel, which
    # rounds the probabilities to bf16/f16 before @ v where the math path keeps them in
    # float32): both against a float64 reference
    q, k, v = inputs[:3]
    mask = inputs[3] if len(inputs) > 3 else None
    causal = case == "sdpa_math_causal"
    kwargs: dict[str, Any] = {"attn_mask": mask, "is_causal": causal,
                              "scale": None if causal else 0.125}
    eager = F.scaled_dot_product_attention(q, k, v, **kwargs)
    reference = F.scaled_dot_product_attention(
        q.double(), k.double(), v.double(),
        **{**kwargs, "attn_mask": None if mask is None else mask.double()})
    ours = (out.double() - reference).abs().max().item()
    eagers = (eager.double() - reference).abs().max().item()
    assert ours <= 2 * eagers + 1e-4, (ours, eagers)


class BertLikeSelfAttention(nn.Module):
    """HF BERT's self-attention with ``attn_implementation="sdpa"``: q, k, v projections
    viewed as 12 heads of 64, the padding mask expanded to ``[B, 1, L, S]`` in the
    model's dtype (as HF builds it under a compiler), ``scale=0.125``."""

    def __init__(self) -> None:
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(768, 768) for _ in range(3))

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, length, _ = hidden.shape
        q, k, v = (p(hidden).view(b, length, 12, 64).transpose(1, 2)
                   for p in (self.query, self.key, self.value))
        keep = attention_mask[:, None, None, :].bool().expand(b, 1, length, length)
        zero = torch.tensor(0.0, dtype=hidden.dtype, device=hidden.device)
        low = torch.tensor(torch.finfo(hidden.dtype).min, dtype=hidden.dtype, device=hidden.device)
        mask = torch.where(keep, zero, low)
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=0.0, scale=0.125, is_causal=False)
        return out.transpose(1, 2).reshape(b, length, 768)


def test_bert_like_sdpa_compiled_by_the_strict_capture(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import ember.frontend as ef
    import ember.frontend.compiled as compiled_module

    compiles: list[tuple[Any, Any]] = []
    real = compiled_module.__dict__["compile_program"]

    def keep(program: Any, backend: str, options: Any, mode: Any) -> Any:
        result = real(program, backend, options, mode)
        compiles.append((program, result))
        return result

    monkeypatch.setattr(compiled_module, "compile_program", keep)
    torch.manual_seed(0)
    model = BertLikeSelfAttention().cuda().to(torch.bfloat16).eval().requires_grad_(False)
    length = 256
    hidden = torch.randn(8, length, 768, device="cuda", dtype=torch.bfloat16)
    attention_mask = torch.ones(8, length, dtype=torch.int64, device="cuda")
    attention_mask[4:, 3 * length // 4:] = 0
    with torch.no_grad(), patch(capture_cache=False, program_cache=False, logs="patterns"):
        out = ef.compile(model)(hidden, attention_mask)
        expected = model(hidden, attention_mask)
    log = capsys.readouterr().err
    assert len(compiles) == 1, log
    captured, result = compiles[0]
    recorded = sorted({n.target for g in captured.graphs.values() for n in g.calls()
                       if "dot_product" in n.target or n.target in (
                           "aten::any.dim", "aten::_safe_softmax.default", "aten::bmm.default")})
    why = f"captured attention ops: {recorded}\nrewrites: " \
          f"{result.program.metadata.get('rewrites')}\n{log}"
    wrapper = result.program.files["forward/wrapper.py"].decode()
    assert any(op in wrapper for op in CUDA_FUSED_ATTENTION), why
    assert not _safe_softmax_kernels(wrapper), why
    assert not _float32_score_buffers(wrapper, length), why
    torch.testing.assert_close(out, expected, atol=3e-2, rtol=3e-2)
