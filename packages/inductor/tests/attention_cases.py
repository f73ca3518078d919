"""Hand-written attention in the forms the attention rewrite knows (one case per rule and
form), captured and run through the aot stage on the CPU, for the attention tests."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from ember.runtime.ir import Program

Case = tuple[Callable[..., torch.Tensor], Callable[[torch.dtype], tuple[torch.Tensor, ...]]]


def core_program(fn: Callable[..., Any], *inputs: Any) -> Program:
    """``fn`` captured (trace) and through the aot stage: a core-functional program,
    without source lines (so printed programs do not name this file's lines)."""
    from ember.aot.stage import AotStage
    from ember.frontend import capture

    program = AotStage().run(capture(fn, *inputs), {})
    for graph in program.graphs.values():
        for node in graph.nodes:
            node.source = None
    return program


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
