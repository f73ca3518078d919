"""The attention rewrite's rules, as data: hand-written attention in the forms the aot
stage emits, each rewritten to ``scaled_dot_product_attention`` (SDPA).

Every rule matches ``softmax(scores, dim=-1) @ v`` (``_softmax`` with
``half_to_float=False``: the softmax runs in the scores' dtype, as SDPA's does), where

- ``scores`` is ``q @ kᵀ`` (``kᵀ`` a ``permute`` swapping the last two dims), with
  any number of constant factors (``mul``/``div`` by a number or a 0-d
  ``scalar_tensor``/``full`` constant) on ``q``, on ``k``, on ``kᵀ`` or on the product:
  their product is SDPA's ``scale`` (1.0 when there is none);
- and the rule's ``mask`` says how a mask enters before the softmax:

==================  =================================  ====================================
rule                scores enter the softmax as        SDPA's mask
==================  =================================  ====================================
``attention``       ``scores``                         none
``additive_mask``   ``scores + mask``                  ``attn_mask=mask`` (a float mask of
                                                       the scores' dtype)
``where_mask``      ``where(keep, scores, fill)``      ``attn_mask=where(keep, 0, fill)``
``masked_fill``     ``where(drop, fill, scores)``      ``attn_mask=where(drop, fill, 0)``
                    (``masked_fill(drop, fill)``)
==================  =================================  ====================================

``fill`` must be ``-inf`` or at most the dtype's ``finfo.min`` (in the scores' dtype):
then ``scores + fill == fill`` and adding the mask equals selecting. A mask that is a
compile-time constant equal to ``tril(ones(L, S))`` (True or 0 on and below the
diagonal, ``fill`` above) becomes ``is_causal=True`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from ember.inductor.passes.pattern_match import LAST_DIM, Const, Matmul, Op, Pattern, Scaled, Var


@dataclass(frozen=True)
class AttentionRule:
    """One rewrite: ``pattern`` is anchored at the ``probs @ v`` matmul's result;
    ``mask`` is ``"none"``, ``"additive"``, ``"keep"`` (where(keep, scores, fill)) or
    ``"drop"`` (where(drop, fill, scores))."""

    name: str
    pattern: Pattern
    mask: str
    description: str


_K_TRANSPOSED = Scaled(Op(("aten::permute.default",), (Scaled(Var("k"), "scale"), Var("perm")),
                          name="k_transposed", shared=True), "scale")
SCORES: Pattern = Scaled(Matmul(Scaled(Var("q"), "scale"), _K_TRANSPOSED), "scale")
"""``q @ kᵀ`` with constant factors anywhere on the way; their product binds ``scale``."""


def _attention(masked_scores: Pattern) -> Pattern:
    probs = Op(("aten::_softmax.default",), (masked_scores, LAST_DIM, False), name="probs")
    return Matmul(probs, Var("v"))


ATTENTION_PATTERNS: tuple[AttentionRule, ...] = (
    AttentionRule(
        "attention",
        _attention(SCORES),
        "none",
        "softmax(q @ kᵀ * scale) @ v"),
    AttentionRule(
        "additive_mask",
        _attention(Op(("aten::add.Tensor",), (SCORES, Var("mask")), name="masked",
                      commutative=True)),
        "additive",
        "softmax(q @ kᵀ * scale + mask) @ v"),
    AttentionRule(
        "where_mask",
        _attention(Op(("aten::where.self",), (Var("cond"), SCORES, Const("fill")),
                      name="masked")),
        "keep",
        "softmax(where(keep, q @ kᵀ * scale, -inf)) @ v"),
    AttentionRule(
        "masked_fill",
        _attention(Op(("aten::where.self",), (Var("cond"), Const("fill"), SCORES),
                      name="masked")),
        "drop",
        "softmax((q @ kᵀ * scale).masked_fill(drop, -inf)) @ v"),
)
"""The rules, tried in order at each candidate node; the first whose pattern matches
and whose checks pass fires."""
