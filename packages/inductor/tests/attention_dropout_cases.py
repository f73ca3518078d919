"""Attention with dropout on its probabilities, in the forms the attention rewrite knows
(``attention_patterns.DROPOUT_FORMS``), and CUDA programs of them built on a machine
without a GPU, for the dropout tests.

A CUDA program here is a CPU capture whose tensors are then declared on ``cuda``
(:func:`on_cuda`): the pass only reads metadata and records SDPA on fake tensors. A
CPU-only torch build cannot pick CUDA's fused SDPA kernel (the choice is CUDA code: its
SDPA records the math path), so :func:`cuda_sdpa` stands in for that choice while
recording: flash attention for 16-bit inputs without a mask, memory-efficient attention
otherwise, as torch's CUDA build does for the inputs of these cases.
``test_cuda_attention_dropout.py`` checks the real choice on a GPU.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from attention_cases import Case, core_program, qkv
from ember.runtime.ir import Program, TensorMeta


def native_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """torch's fused dropout in training (what ``F.dropout`` records on CUDA)."""
    out: torch.Tensor = torch.ops.aten.native_dropout.default(x, p, True)[0]
    return out


def _probs(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k.transpose(-2, -1) * 0.5, -1)


def dropout_bernoulli(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``F.dropout`` as the CPU records it (``bernoulli(1 - p) / (1 - p)``)."""
    return F.dropout(_probs(q, k), 0.1, training=True) @ v


def dropout_native(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``F.dropout`` as CUDA records it: torch's fused ``native_dropout``."""
    return native_dropout(_probs(q, k), 0.1) @ v


def dropout_uniform(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """By hand, as torch decomposes ``native_dropout``: ``(u > p) * probs * (1/(1-p))``."""
    probs = _probs(q, k)
    return ((torch.rand_like(probs) > 0.25) * probs * (1 / 0.75)) @ v


def dropout_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """HF GPT-2's eager attention in training: a causal ``where``, softmax, dropout."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    future = torch.triu(torch.ones(scores.size(-2), scores.size(-1), dtype=torch.bool,
                                    device=scores.device), 1)
    probs = torch.softmax(torch.where(future, torch.finfo(q.dtype).min, scores), -1)
    return native_dropout(probs, 0.1) @ v


def dropout_additive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     mask: torch.Tensor) -> torch.Tensor:
    """HF BERT's eager attention in training: an additive padding mask, then dropout."""
    probs = torch.softmax(q @ k.transpose(-2, -1) * 0.5 + mask, -1)
    return native_dropout(probs, 0.1) @ v


def padding(dtype: torch.dtype) -> torch.Tensor:
    """An additive [1, 1, 1, 5] mask: the last key padded."""
    return torch.tensor([0, 0, 0, 0, torch.finfo(dtype).min]).to(dtype).view(1, 1, 1, 5)


DROPOUT_CASES: dict[str, tuple[Case, torch.dtype, str]] = {
    "dropout_bernoulli": ((dropout_bernoulli, lambda dt: qkv(dt)), torch.float32, "bernoulli"),
    "dropout_native": ((dropout_native, lambda dt: qkv(dt)), torch.bfloat16, "native"),
    "dropout_uniform": ((dropout_uniform, lambda dt: qkv(dt)), torch.float32, "uniform"),
    "dropout_causal": ((dropout_causal, lambda dt: qkv(dt)), torch.bfloat16, "native"),
    "dropout_additive": ((dropout_additive, lambda dt: (*qkv(dt), padding(dt))),
                         torch.float32, "native"),
}
"""Case name -> (case, the dtype of its golden IR, its ``DropoutForm``). Every case is
rewritten on CUDA (with ``dropout_p`` 0.1, ``dropout_uniform`` 0.25), none on the CPU."""


def on_cuda(program: Program) -> Program:
    """``program`` with every tensor and device argument on ``cuda`` (in place)."""
    cuda = torch.device("cuda")

    def move(x: Any) -> Any:
        if isinstance(x, TensorMeta):
            return dataclasses.replace(x, device=cuda)
        if isinstance(x, torch.device):
            return cuda
        if isinstance(x, (tuple, list)):
            return type(x)(move(item) for item in x)
        if isinstance(x, dict):
            return {key: move(value) for key, value in x.items()}
        return x

    for graph in program.graphs.values():
        for node in graph.nodes:
            node.meta, node.args, node.kwargs = move(node.meta), move(node.args), move(node.kwargs)
    return program


def cuda_program(fn: Callable[..., Any], *inputs: torch.Tensor) -> Program:
    """:func:`~attention_cases.core_program` of ``fn`` on the CPU, then on ``cuda``."""
    return on_cuda(core_program(fn, *inputs))


def cuda_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
              is_causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` as torch's CUDA build dispatches these cases
    (module docstring); monkeypatched in while the pass records."""
    assert not enable_gqa
    aten = torch.ops.aten
    if attn_mask is None and query.dtype in (torch.float16, torch.bfloat16):
        out: torch.Tensor = aten._scaled_dot_product_flash_attention.default(
            query, key, value, dropout_p, is_causal, False, scale=scale)[0]
        return out
    grad = any(t.requires_grad for t in (query, key, value))
    out = aten._scaled_dot_product_efficient_attention.default(
        query, key, value, attn_mask, grad, dropout_p, is_causal, scale=scale)[0]
    return out
