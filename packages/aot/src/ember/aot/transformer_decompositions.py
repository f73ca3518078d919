"""Decompositions of PyTorch's transformer "fast path" ops.

In inference (``eval()`` under ``no_grad``) ``nn.MultiheadAttention`` calls
``_native_multi_head_attention`` and ``nn.TransformerEncoderLayer`` calls
``_transformer_encoder_layer_fwd``: one fused call each, for which torch registers no
decomposition. Kept whole they were extern calls that blocked fusion and Ember's own
attention. Here they are written out as linear projections, head views, scaled dot
product attention (``scaled_dot_product_attention``: the fused attention kernel the
backend calls) or, when the attention weights are returned, ``softmax(q kᵀ)``, then
``layer_norm`` / ``relu`` / ``gelu`` / ``add``.

The ops' contract, as eager computes it (CPU; checked against eager by
``tests/test_transformer_decompositions.py``):

- ``query``, ``key`` and ``value`` are ``[B, L, E]`` of one shape (batch first: the
  modules take the fast path only with ``batch_first=True``); ``qkv_weight`` ``[3E, E]``
  and ``qkv_bias`` ``[3E]`` hold the q, k and v projections in that order; each of the
  ``num_head`` heads has ``E / num_head`` features, and the scores are scaled by
  ``1 / sqrt(E / num_head)``.
- ``mask``: any element that is nonzero (``True`` for a bool mask; for a float mask
  any value but 0, ``-inf`` or not: it is *not* added to the scores) masks that key
  out, the opposite of SDPA's bool masks. ``mask_type`` 0: ``[L, L]`` (an attention
  mask, the same for every batch and head), 1: ``[B, L]`` (a key padding mask), 2 (or
  0 with four dims): ``[B, num_head, L, L]`` (both merged); any other shape or type is
  an error of eager's, which then stays eager's (the call is kept whole).
- A query whose keys are all masked gets NaN (softmax over no key), in the output and
  in its weights.
- ``need_weights``: the second output is the softmax probabilities, averaged over the
  heads (``[B, L, L]``) when ``average_attn_weights``, else ``[B, num_head, L, L]``;
  without it the second output is undefined in eager (``None``), an empty ``[0]``
  tensor for fake tensors, which is what is recorded and returned here.
- ``_transformer_encoder_layer_fwd``: with ``norm_first``,
  ``x + attn(ln1(x))`` then ``x + ffn(ln2(x))``, else ``ln1(x + attn(x))`` then
  ``ln2(x + ffn(x))``; ``ffn(x) = linear2(act(linear1(x)))`` with ``act`` ``relu``, or
  with ``use_gelu`` the ``gelu`` of ``_addmm_activation`` (eager's kernel for
  ``linear1`` and ``act``): exact on the CPU, the tanh approximation on CUDA (cuBLASLt's
  epilogue, as torch's own decomposition of ``_addmm_activation`` says; eager's fp32
  result on an H200 is not the exact ``gelu``'s); both norms use ``eps``;
  ``attn`` is the op above without weights.

Nested tensor inputs (``nn.TransformerEncoder``'s sparsity fast path) are not
decomposed: the call stays whole, and the fallback log says why
(:mod:`ember.aot.kept_whole`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from ember.aot._torch import OpOverload
from ember.aot.kept_whole import keep_whole

TRANSFORMER_DECOMPOSITIONS: dict[OpOverload, Callable[..., Any]] = {}

_MHA = torch.ops.aten._native_multi_head_attention.default
_ENCODER_LAYER = torch.ops.aten._transformer_encoder_layer_fwd.default


def _register(op: OpOverload) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        TRANSFORMER_DECOMPOSITIONS[op] = fn
        return fn
    return wrap


class _KeptWhole(Exception):
    """A call the decomposition does not cover; the message says why."""


def _attended(mask: torch.Tensor | None, mask_type: int | None, batch: Any, heads: int,
              length: Any) -> torch.Tensor | None:
    """Which keys each query attends to (``True``: attended, SDPA's sense), broadcastable
    to the scores ``[B, heads, L, L]``; None without a mask."""
    if mask is None:
        return None
    if mask_type not in (0, 1, 2):
        raise _KeptWhole(f"its mask_type is {mask_type!r} (eager accepts 0, 1 or 2)")
    shape = tuple(mask.shape)
    if mask.dim() == 2 and mask_type == 0 and shape == (length, length):
        broadcastable = mask
    elif mask.dim() == 2 and mask_type == 1 and shape == (batch, length):
        broadcastable = mask.view(batch, 1, 1, length)
    elif mask.dim() == 4 and mask_type != 1 and shape == (batch, heads, length, length):
        broadcastable = mask
    else:
        raise _KeptWhole(f"its mask of shape {list(shape)} does not fit mask_type "
                         f"{mask_type} (an error of eager's)")
    if broadcastable.dtype == torch.bool:
        return torch.logical_not(broadcastable)
    # NOTE: any nonzero element masks its key out, in float masks too (eager's kernel
    # does not add them to the scores): 1.0 masks as -inf does.
    return broadcastable == 0


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """``[B, L, E]`` -> ``[B, heads, L, E / heads]`` (a view)."""
    batch, length, features = x.shape
    return x.view(batch, length, heads, features // heads).transpose(1, 2)


def _projections(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 weight: torch.Tensor, bias: torch.Tensor,
                 embed_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k and v projected (``[B, L, E]`` each): one matmul for self-attention, as
    eager does, else one per distinct input."""
    if query is key and key is value:
        return F.linear(query, weight, bias).chunk(3, dim=-1)  # type: ignore[return-value]
    q = F.linear(query, weight[:embed_dim], bias[:embed_dim])
    if key is value:
        k, v = F.linear(key, weight[embed_dim:], bias[embed_dim:]).chunk(2, dim=-1)
        return q, k, v
    k = F.linear(key, weight[embed_dim:2 * embed_dim], bias[embed_dim:2 * embed_dim])
    v = F.linear(value, weight[2 * embed_dim:], bias[2 * embed_dim:])
    return q, k, v


def _check_inputs(tensors: tuple[torch.Tensor, ...], embed_dim: int, heads: int) -> None:
    if any(t.is_nested for t in tensors):
        raise _KeptWhole("an input is a nested tensor (nn.TransformerEncoder's sparsity "
                         "fast path), which the decomposition does not cover")
    query, key, value = tensors[:3]
    if query.dim() != 3 or query.shape != key.shape or key.shape != value.shape:
        raise _KeptWhole("query, key and value are not [B, L, E] tensors of one shape "
                         "(an error of eager's)")
    if heads <= 0 or embed_dim % heads or query.shape[-1] != embed_dim:
        raise _KeptWhole(f"embed_dim {embed_dim} does not fit the input or "
                         f"{heads} heads (an error of eager's)")


def _attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               embed_dim: int, heads: int, qkv_weight: torch.Tensor,
               qkv_bias: torch.Tensor, proj_weight: torch.Tensor,
               proj_bias: torch.Tensor, mask: torch.Tensor | None,
               need_weights: bool, average_attn_weights: bool,
               mask_type: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``_native_multi_head_attention``'s two results (see the module docstring)."""
    _check_inputs((query, key, value, qkv_weight, qkv_bias, proj_weight, proj_bias),
                  embed_dim, heads)
    batch, length, _ = query.shape
    attended = _attended(mask, mask_type, batch, heads, length)
    q, k, v = (_heads(t, heads) for t in _projections(query, key, value, qkv_weight,
                                                      qkv_bias, embed_dim))
    scale = 1.0 / math.sqrt(embed_dim // heads)
    if need_weights:
        scores = torch.matmul(q * scale, k.transpose(-2, -1))
        if attended is not None:
            scores = scores.masked_fill(torch.logical_not(attended), float("-inf"))
        probabilities = torch.softmax(scores, dim=-1)
        per_head = torch.matmul(probabilities, v)
        weights = probabilities.mean(dim=1) if average_attn_weights else probabilities
    else:
        per_head = F.scaled_dot_product_attention(q, k, v, attn_mask=attended, scale=scale)
        if attended is not None:
            # NOTE: a query with every key masked is NaN in eager (a softmax over no
            # key); SDPA's fused kernels give it 0.
            anything = torch.any(attended, dim=-1, keepdim=True)
            per_head = torch.where(anything, per_head, float("nan"))
        weights = torch.empty((0,), dtype=query.dtype, device=query.device)
    joined = per_head.transpose(1, 2).reshape(batch, length, embed_dim)
    return F.linear(joined, proj_weight, proj_bias), weights


@_register(_MHA)
def native_multi_head_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                embed_dim: int, num_head: int, qkv_weight: torch.Tensor,
                                qkv_bias: torch.Tensor, proj_weight: torch.Tensor,
                                proj_bias: torch.Tensor, mask: torch.Tensor | None = None,
                                need_weights: bool = True, average_attn_weights: bool = True,
                                mask_type: int | None = None) -> Any:
    """``nn.MultiheadAttention``'s fast path (module docstring)."""
    try:
        return _attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
                          proj_weight, proj_bias, mask, need_weights,
                          average_attn_weights, mask_type)
    except _KeptWhole as e:
        return keep_whole(_MHA, str(e))


@_register(_ENCODER_LAYER)
def transformer_encoder_layer_fwd(
        src: torch.Tensor, embed_dim: int, num_heads: int, qkv_weight: torch.Tensor,
        qkv_bias: torch.Tensor, proj_weight: torch.Tensor, proj_bias: torch.Tensor,
        use_gelu: bool, norm_first: bool, eps: float, norm_weight_1: torch.Tensor,
        norm_bias_1: torch.Tensor, norm_weight_2: torch.Tensor, norm_bias_2: torch.Tensor,
        ffn_weight_1: torch.Tensor, ffn_bias_1: torch.Tensor, ffn_weight_2: torch.Tensor,
        ffn_bias_2: torch.Tensor, mask: torch.Tensor | None = None,
        mask_type: int | None = None) -> Any:
    """``nn.TransformerEncoderLayer``'s fast path (module docstring)."""
    def attention(x: torch.Tensor) -> torch.Tensor:
        return _attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                          proj_bias, mask, False, False, mask_type)[0]

    def feed_forward(x: torch.Tensor) -> torch.Tensor:
        hidden = F.linear(x, ffn_weight_1, ffn_bias_1)
        if use_gelu:
            # NOTE: eager's _addmm_activation: tanh-approximate gelu on CUDA, exact elsewhere
            hidden = F.gelu(hidden, approximate="tanh" if hidden.is_cuda else "none")
        else:
            hidden = F.relu(hidden)
        return F.linear(hidden, ffn_weight_2, ffn_bias_2)

    def norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, [embed_dim], weight, bias, eps)

    try:
        if src.is_nested:
            raise _KeptWhole("its input is a nested tensor (nn.TransformerEncoder's "
                             "sparsity fast path), which the decomposition does not cover")
        x = src
        if norm_first:
            x = x + attention(norm(x, norm_weight_1, norm_bias_1))
            return x + feed_forward(norm(x, norm_weight_2, norm_bias_2))
        x = norm(x + attention(x), norm_weight_1, norm_bias_1)
        return norm(x + feed_forward(x), norm_weight_2, norm_bias_2)
    except _KeptWhole as e:
        return keep_whole(_ENCODER_LAYER, str(e))
