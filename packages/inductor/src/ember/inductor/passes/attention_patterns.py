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

SDPA's own math path (``_scaled_dot_product_attention_math``, what torch records for
``F.scaled_dot_product_attention`` when it picks no fused kernel) has rules of its own,
of ``kind`` ``"math"`` / ``"math_upcast"``: it multiplies ``q`` and ``kᵀ`` each by
``sqrt(scale)`` (``mul.Scalar``; ``Scaled`` binds their product), adds the mask, and
runs ``_safe_softmax``, which the aot stage writes as
``where(not any(scores != -inf, -1), 0, _softmax(scores))`` (``safe_softmax`` below: a
row that is ``-inf`` everywhere gives 0, not NaN). In bfloat16/float16 (unless
``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp``) it first casts ``q``, ``k``
and ``v`` to float32 and the result back:

=========================  ================================================  ===========
rule                       form                                              SDPA's mask
=========================  ================================================  ===========
``sdpa_math``              ``safe_softmax(q' @ k'ᵀ) @ v``, ``q' = q *        none
                           sqrt(scale)``, ``k'ᵀ = kᵀ * sqrt(scale)``
``sdpa_math_mask``         ``safe_softmax(q' @ k'ᵀ + mask) @ v``             ``mask``
``sdpa_math_upcast``       ``(safe_softmax(q'' @ k''ᵀ) @ v.float()).to(D)``  none
                           with ``q'' = q.float() * sqrt(scale)`` (the same
                           for ``k''``); ``q``, ``k``, ``v`` of dtype ``D``
``sdpa_math_upcast_mask``  ``(safe_softmax(q'' @ k''ᵀ + mask) @              ``mask``
                           v.float()).to(D)``
=========================  ================================================  ===========

The ``math_upcast`` rules fire only on SDPA's own calls (see the attention pass's
docstring): they give back the precision the user chose by calling SDPA.

Every rule also matches with dropout on the probabilities between the softmax and
``@ v`` (``F.dropout(probs, p, training=True)``, ``nn.Dropout``: HF eager attention in
training), in one of the forms of :data:`DROPOUT_FORMS`, which becomes SDPA's
``dropout_p=p``:

================  ===================================================  ================
form              the dropped probabilities ``probs'``                 where
================  ===================================================  ================
``native``        ``native_dropout(probs, p, True)[0]`` (its mask,     ``F.dropout`` on
                  ``[1]``, read nowhere)                               CUDA (torch's
                                                                       fused dropout)
``bernoulli``     ``probs * (bernoulli(empty_like(probs), 1 - p) /     ``F.dropout`` on
                  (1 - p))``                                           the CPU
``uniform``       ``probs * (rand_like(probs) > p) / (1 - p)`` (or     by hand; torch's
                  ``>=``; ``* (1 / (1 - p))``)                         decomposition of
                                                                       ``native_dropout``
================  ===================================================  ================

``p`` must be a number in ``[0, 1)`` and the survivors scaled by ``1 / (1 - p)``
(checked by the pass; a tensor ``p`` or scale is matched only to be refused with the
reason). A form that matches none of these (dropout before the softmax, a mask
broadcast over rows) is not attention with dropout and is left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from ember.inductor.passes.pattern_match import (
    LAST_DIM,
    Alt,
    Bind,
    Const,
    Matmul,
    Op,
    Pattern,
    Scaled,
    Var,
)


@dataclass(frozen=True)
class AttentionRule:
    """One rewrite: ``pattern`` is anchored at the ``probs @ v`` matmul's result;
    ``mask`` is ``"none"``, ``"additive"``, ``"keep"`` (where(keep, scores, fill)) or
    ``"drop"`` (where(drop, fill, scores)). ``kind`` is ``"written"`` (attention as a
    user writes it), ``"math"`` (SDPA's math path in the inputs' dtype) or
    ``"math_upcast"`` (SDPA's math path with q, k, v cast to float32 and the result
    back: the pattern is anchored at that cast)."""

    name: str
    pattern: Pattern
    mask: str
    description: str
    kind: str = "written"


_K_TRANSPOSED = Scaled(Op(("aten::permute.default",), (Scaled(Var("k"), "scale"), Var("perm")),
                          name="k_transposed", shared=True), "scale")
SCORES: Pattern = Scaled(Matmul(Scaled(Var("q"), "scale"), _K_TRANSPOSED), "scale")
"""``q @ kᵀ`` with constant factors anywhere on the way; their product binds ``scale``."""


def _attention(masked_scores: Pattern) -> Pattern:
    probs = Op(("aten::_softmax.default",), (masked_scores, LAST_DIM, False), name="probs")
    return Matmul(_maybe_dropped(probs, "probs"), Var("v"))


@dataclass(frozen=True)
class DropoutForm:
    """One way dropout on the probabilities is written: ``build(probs, name)`` is the
    pattern of ``probs`` (the probabilities' pattern, whose value is bound to ``name``)
    after dropout. It binds ``dropout_mask`` (the value that decides which probabilities
    are dropped) and the numbers (or, to be refused, tensors) that give ``p``."""

    name: str
    build: Callable[[Pattern, str], Pattern]
    description: str


_MUL_TENSOR = ("aten::mul.Tensor",)
_EMPTY = ("aten::empty_strided.default", "aten::empty_like.default",
          "aten::empty.memory_format")


def _number(name: str) -> Pattern:
    """A constant number bound to ``name``, or (to be refused with the reason) a tensor
    bound to ``name_tensor``."""
    return Alt((Const(name), Var(f"{name}_tensor")))


def _native_dropout(probs: Pattern, name: str) -> Pattern:
    return Op(("aten::native_dropout.default",), (probs, Const("dropout_p"), True),
              name="dropout_mask", index=0)


def _bernoulli_dropout(probs: Pattern, name: str) -> Pattern:
    noise = _aliases(Op(_EMPTY, (), kwargs=None), most=2)
    mask = Op(("aten::bernoulli.p",), (noise, Const("keep")), name="dropout_mask")
    scaled = Op(("aten::div.Scalar", "aten::div.Tensor"), (mask, _number("keep_divisor")))
    return Op(_MUL_TENSOR, (probs, scaled), commutative=True)


def _uniform_dropout(probs: Pattern, name: str) -> Pattern:
    uniform = _aliases(Op(("aten::rand_like.default",), (Var(name),), kwargs=None), most=2)
    mask = Op(("aten::gt.Scalar", "aten::ge.Scalar", "aten::gt.Tensor", "aten::ge.Tensor"),
              (uniform, _number("dropout_p")), name="dropout_mask")
    dropped = Op(_MUL_TENSOR, (probs, mask), commutative=True)
    return Alt((Scaled(dropped, "keep_scale"),
                Op(("aten::mul.Tensor", "aten::div.Tensor"), (dropped, Var("keep_scale_tensor")))))


DROPOUT_FORMS: tuple[DropoutForm, ...] = (
    DropoutForm("native", _native_dropout, "native_dropout(probs, p, True)[0]"),
    DropoutForm("bernoulli", _bernoulli_dropout,
                "probs * (bernoulli(empty_like(probs), 1 - p) / (1 - p))"),
    DropoutForm("uniform", _uniform_dropout, "probs * (rand_like(probs) > p) / (1 - p)"),
)
"""The forms of dropout on the probabilities (module docstring), tried in order after
the probabilities without dropout."""


def _maybe_dropped(probs: Pattern, name: str) -> Pattern:
    """``probs``, or ``probs`` after dropout in one of :data:`DROPOUT_FORMS`."""
    return Alt((probs, *(form.build(probs, name) for form in DROPOUT_FORMS)))


_TO_COPY = ("aten::_to_copy.default",)


def _float32(name: str) -> Pattern:
    """``name`` cast to float32 (SDPA's math path upcasting an input)."""
    return Op(_TO_COPY, (Var(name),), kwargs=(("dtype", torch.float32),))


def _math_scores(operand: Callable[[str], Pattern]) -> Pattern:
    k_transposed = Scaled(Op(("aten::permute.default",), (operand("k"), Var("perm")),
                             name="k_transposed", shared=True), "scale")
    return Matmul(Scaled(operand("q"), "scale"), k_transposed)


def _aliases(inner: Pattern, most: int) -> Pattern:
    """``inner`` under up to ``most`` ``alias`` calls."""
    options = [inner]
    for _ in range(most):
        options.append(Op(("aten::alias.default",), (options[-1],)))
    return Alt(tuple(reversed(options)))


def _safe_softmax_attention(masked_scores: Pattern, operand: Callable[[str], Pattern]) -> Pattern:
    """``_safe_softmax(masked_scores, -1) @ v`` as the aot stage writes it: ``_softmax``,
    then 0 where every score of the row is ``-inf``."""
    all_masked = Op(("aten::logical_not.default",), (
        Op(("aten::any.dim",), (
            Op(("aten::logical_not.default",), (
                Op(("aten::eq.Scalar",), (Var("logits"), float("-inf"))),)),
            LAST_DIM, True)),))
    zero = _aliases(Op(("aten::full_like.default",), (Var("probs"), Const("zero")), kwargs=None),
                    most=3)
    probs = Op(("aten::_softmax.default",), (Bind("logits", masked_scores), LAST_DIM, False),
               name="probs")
    safe = Op(("aten::where.self",), (all_masked, zero, probs), name="safe")
    return Matmul(_maybe_dropped(safe, "safe"), operand("v"))


def _math(mask: bool, upcast: bool) -> Pattern:
    operand: Callable[[str], Pattern] = _float32 if upcast else Var
    scores = _math_scores(operand)
    masked = (Op(("aten::add.Tensor",), (scores, Var("mask")), name="masked", commutative=True)
              if mask else scores)
    attention = _safe_softmax_attention(masked, operand)
    if not upcast:
        return attention
    return Op(_TO_COPY, (attention,), kwargs=(("dtype", Var("out_dtype")),), name="out")


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
    AttentionRule(
        "sdpa_math_upcast_mask",
        _math(mask=True, upcast=True),
        "additive",
        "SDPA's math path, q, k, v cast to float32, with a mask",
        "math_upcast"),
    AttentionRule(
        "sdpa_math_upcast",
        _math(mask=False, upcast=True),
        "none",
        "SDPA's math path, q, k, v cast to float32",
        "math_upcast"),
    AttentionRule(
        "sdpa_math_mask",
        _math(mask=True, upcast=False),
        "additive",
        "SDPA's math path with a mask",
        "math"),
    AttentionRule(
        "sdpa_math",
        _math(mask=False, upcast=False),
        "none",
        "SDPA's math path",
        "math"),
)
"""The rules, tried in order (each at every candidate node); the first whose pattern
matches and whose checks pass fires. The ``math_upcast`` rules come before ``math``:
the float32 ``math`` rules would also match inside their casts."""
