"""Hand-written attention in the forms the attention rewrite knows (one case per rule and
form), and SDPA's own math path (``MATH_CASES``), captured and run through the aot stage
on the CPU, for the attention tests."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from ember.runtime.ir import Program, SourceLocation

Case = tuple[Callable[..., torch.Tensor], Callable[[torch.dtype], tuple[torch.Tensor, ...]]]


def core_program(fn: Callable[..., Any], *inputs: Any,
                 source: SourceLocation | None = None) -> Program:
    """``fn`` captured (trace) and through the aot stage: a core-functional program,
    every call's source line ``source`` (by default none: so printed programs do not
    name this file's lines; placeholders and outputs get none)."""
    from ember.aot.stage import AotStage
    from ember.frontend import capture

    program = AotStage().run(capture(fn, *inputs), {})
    for graph in program.graphs.values():
        for node in graph.nodes:
            node.source = source if node.op == "call" else None
    return program


CUDA_FUSED_ATTENTION = ("_scaled_dot_product_flash_attention",
                        "_scaled_dot_product_efficient_attention",
                        "_scaled_dot_product_cudnn_attention")
"""The fused attention ops a CUDA rewrite may call (the wrapper's extern names)."""

SDPA_LINE = SourceLocation("model.py", 7, "forward",
                           "out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)")
"""A user's line calling SDPA: what the frontends record for each op of SDPA's math path."""


def math_program(fn: Callable[..., Any], *inputs: Any) -> Program:
    """:func:`core_program` of ``fn`` with every node recorded from :data:`SDPA_LINE`."""
    return core_program(fn, *inputs, source=SDPA_LINE)


def qkv(dtype: torch.dtype = torch.float32, heads: int = 2) -> tuple[torch.Tensor, ...]:
    """q [1, heads, 3, 4], k and v [1, heads, 5, 4] (3 queries, 5 keys), seeded."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, heads, 3, 4, generator=g)
    k = torch.randn(1, heads, 5, 4, generator=g)
    v = torch.randn(1, heads, 5, 4, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def keep_mask() -> torch.Tensor:
    """A [3, 5] boolean mask, True = attend, at least one True per row."""
    return torch.tensor([[1, 0, 1, 1, 0], [0, 1, 1, 0, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)


def scale_after(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1) @ v


def scale_before(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax((q * 0.125) @ (k * 2.0).transpose(-2, -1), dim=-1) @ v


def additive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k.transpose(-2, -1) * 0.5 + mask, dim=-1) @ v


def where_min(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              keep: torch.Tensor) -> torch.Tensor:
    scores = q @ k.transpose(-2, -1) * 0.5
    return torch.softmax(torch.where(keep, scores, torch.finfo(q.dtype).min), -1) @ v


def masked_fill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                keep: torch.Tensor) -> torch.Tensor:
    scores = (q @ k.transpose(-2, -1) * 0.5).masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, -1) @ v


def causal_tril(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = q @ k.transpose(-2, -1) * 0.5
    causal = torch.tril(torch.ones(scores.size(-2), scores.size(-1), dtype=torch.bool,
                                    device=scores.device))
    return torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ v


def causal_triu(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """GPT-2's eager form: a tensor-scalar division, ``finfo.min`` above the diagonal."""
    scores = q @ k.transpose(-1, -2) / torch.full([], q.size(-1) ** 0.5, dtype=q.dtype)
    future = torch.triu(torch.ones(scores.size(-2), scores.size(-1), dtype=torch.bool,
                                    device=scores.device), 1)
    masked = torch.where(future, torch.finfo(q.dtype).min, scores)
    return torch.softmax(masked, -1) @ v


CASES: dict[str, Case] = {
    "scale_after": (scale_after, lambda dt: qkv(dt)),
    "scale_before": (scale_before, lambda dt: qkv(dt)),
    "additive_mask": (additive, lambda dt: (*qkv(dt), torch.randn(3, 5).to(dt))),
    "where_mask": (where_min, lambda dt: (*qkv(dt), keep_mask())),
    "masked_fill": (masked_fill, lambda dt: (*qkv(dt), keep_mask())),
    "causal_tril": (causal_tril, lambda dt: qkv(dt)),
    "causal_triu": (causal_triu, lambda dt: qkv(dt)),
}
"""Case name -> (function, inputs for a dtype). Every case is rewritten."""


# -- SDPA's own math path (what torch records for F.scaled_dot_product_attention when it
# picks no fused kernel): called directly, so that the CPU records it too

_MATH = torch.ops.aten._scaled_dot_product_attention_math.default


def sdpa_math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = _MATH(q, k, v, None, 0.0, False, None, scale=0.125)[0]
    return out


def sdpa_math_mask(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   mask: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = _MATH(q, k, v, mask, 0.0, False, None, scale=0.125)[0]
    return out


def sdpa_math_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Scale left to SDPA (``1/sqrt(4)``); the causal mask the math path builds (float32
    also for bfloat16 inputs) becomes ``is_causal=True``."""
    out: torch.Tensor = _MATH(q, k, v, None, 0.0, True)[0]
    return out


def padding_mask(dtype: torch.dtype) -> torch.Tensor:
    """HF BERT's additive padding mask of a batch of 1 over 5 keys, the last 2 padding:
    [1, 1, 1, 5], 0 for tokens, ``finfo(dtype).min`` for padding."""
    keep = torch.tensor([1, 1, 1, 0, 0], dtype=torch.bool)
    return torch.where(keep, 0.0, torch.finfo(dtype).min).to(dtype).view(1, 1, 1, 5)


MATH_CASES: dict[str, Case] = {
    "sdpa_math": (sdpa_math, lambda dt: qkv(dt)),
    "sdpa_math_mask": (sdpa_math_mask, lambda dt: (*qkv(dt), padding_mask(dt))),
    "sdpa_math_causal": (sdpa_math_causal, lambda dt: qkv(dt)),
}
"""Case name -> (function, inputs for a dtype), for :func:`math_program`."""
