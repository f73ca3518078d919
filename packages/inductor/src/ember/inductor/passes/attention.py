"""The attention rewrite: hand-written attention (``softmax(q @ kᵀ * scale + mask) @ v``
in the forms of :data:`~ember.inductor.passes.attention_patterns.ATTENTION_PATTERNS`)
becomes the fused SDPA kernel torch picks for the graph's device and inputs.

The replacement is what the aot stage records for
``F.scaled_dot_product_attention(q, k, v, attn_mask=..., is_causal=..., scale=...)``
on the same device (CPU: ``_scaled_dot_product_flash_attention_for_cpu``; CUDA:
flash, memory-efficient or cuDNN attention, as torch dispatches): it is recorded with
the runtime's :class:`~ember.runtime.tracing.GraphRecorder` on fake tensors of the
matched values and spliced in, and the inductor runs it as an extern call. A rule
does not fire (logged under ``EMBER_LOGS=patterns`` with the reason) when:

- the program is a training program (it has a ``backward`` graph: the forward's
  intermediates are saved for a backward derived from the unfused ops). Training
  programs are rewritten earlier: the aot stage runs this pass on the forward before it
  derives the backward (``InductorStage.pre_grad_passes``, ``ember.aot.pre_grad``), so
  that SDPA's fused backward replaces the unfused ops'; the SDPA call is then recorded
  for inputs that require grad;
- an intermediate value of the match is read outside it (a mask or the scores used
  twice, the probabilities returned);
- q, k, v and the scores do not share one floating dtype (an upcast softmax around
  low-precision matmuls is not what SDPA computes), or a mask has another dtype;
- a ``where``/``masked_fill`` fill is not ``-inf`` or a huge negative value
  (:func:`~ember.inductor.passes.attention_masks.fills_like_minus_infinity`);
- torch has no fused kernel for these inputs (it would run its math path, the same
  unfused ops), or recording it gives ops outside Core ATen or new shape guards;
- dropout on the probabilities is not SDPA's (a ``p`` outside ``[0, 1)`` or a tensor,
  survivors not scaled by ``1/(1 - p)``, a mask broadcast over the probabilities, the
  mask read elsewhere), or the rewrite of attention with dropout is off (below).

Dropout: attention with dropout on its probabilities (``softmax(...)`` then
``F.dropout(p)`` / ``nn.Dropout`` in training, then ``@ v``; the forms of
``attention_patterns.DROPOUT_FORMS``) becomes SDPA with ``dropout_p=p``, on by default
as in torch.compile's own attention fusion. The fused kernel draws its own mask (on
CUDA: flash or memory-efficient attention, on torch's CUDA generator; its backward
reuses the forward's Philox seed and offset, so the gradient sees the forward's mask):
not bitwise eager's mask, nor the one Ember's own dropout kernels would draw, but the
same distribution (each probability zeroed with probability ``p``, the others scaled
by ``1/(1 - p)``), exactly the difference torch.compile's rewrite makes. torch's CPU
kernel takes no dropout, so on the CPU it never fires (logged). The inductor option
``attention_dropout=False`` turns it off (the rule is refused, logged), and so does
``eager_random=True``, whose contract is eager's random values
(:func:`dropout_enabled`; the pre-grad pass gets the options through
``PreGradPass.configure``, the inference pipeline through ``passes.pipeline_for``).

Semantics: SDPA computes ``softmax(q @ kᵀ * scale + mask) @ v`` in the inputs' dtype
with float32 accumulation, as the matched form does up to rounding. One difference
remains for hand-written attention: a row in which every position is masked with
``-inf`` is NaN in eager and 0 from SDPA's kernels.

SDPA's own math path (the ``math`` and ``math_upcast`` rules) is what torch records for
``F.scaled_dot_product_attention`` when it picks no fused kernel for the capture (HF
BERT under the strict capture on CUDA): in bfloat16/float16 it computes in float32, two
float32 ``[.., L, S]`` score buffers alive at once. Rewriting it back gives the fused
kernel the user's eager call runs. Only the user's call to SDPA makes that sound: the
same ops written by hand (``q.float() @ k.float().mT`` ... ``.to(torch.bfloat16)``)
ask for float32 precision, which a bfloat16 SDPA would not keep. So a ``math_upcast``
rule fires only when

- its structure is SDPA's math path: q, k and v each cast to float32, ``sqrt(scale)``
  on q and on kᵀ, ``_safe_softmax`` (the ``any``/``where`` around ``_softmax``), and the
  result cast back to the inputs' (common) dtype;
- and every node of the match (the casts included) was recorded from a source line
  that calls ``scaled_dot_product_attention`` (``SourceLocation.text``: the frontends
  record the user's line of each op; SDPA's math path comes from one call).

A line that names SDPA but upcasts its arguments itself (``F.scaled_dot_product_attention
(q.float(), k.float(), v.float()).to(q.dtype)``) records the same ops from the same line
and would be rewritten to a bfloat16 SDPA: the one form this cannot tell apart. A call
through another name (``sdpa = F.scaled_dot_product_attention``) or a program without
source lines is not rewritten (logged). The ``math`` rules (no casts: float32 inputs,
or ``allow_fp16_bf16_reduction_math_sdp``) keep the dtype, like hand-written attention,
and need no provenance. A float32 mask around bfloat16/float16 inputs (SDPA's math path
adds it in float32) is kept only when it is causal (it becomes ``is_causal``). The scale
is the product of the two ``sqrt(scale)`` factors, given as the shortest decimal whose
square root is that factor (``0.125``, not ``0.12500000000000003``).

Fully masked rows: ``_safe_softmax`` gives 0 where plain softmax gives NaN; since
torch 2.5 (pytorch/pytorch#133882) SDPA's fused kernels give 0 too (the CPU flash kernel
does, measured: ``test_attention_rewrite_sdpa_math.py``; on CUDA flash and
memory-efficient attention by that change; cuDNN attention is what eager runs for
these inputs anyway). Rows with a position left are unchanged up to rounding: SDPA
keeps the scores in float32 like the math path, and rounds q, k, v, the mask and the
output as the math path does (they are of the inputs' dtype on both sides).

Each rewrite is counted in ``program.metadata["rewrites"]`` (``{"attention": n}``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from ember.inductor.lowering.registry import EXTERN_OPS
from ember.inductor.passes.attention_masks import (
    ConstantEvaluator,
    additive_is_causal,
    fills_like_minus_infinity,
    keep_is_causal,
)
from ember.inductor.passes.attention_patterns import ATTENTION_PATTERNS, AttentionRule
from ember.inductor.passes.pattern_match import Match, Matcher, Matmul, Op, Pattern
from ember.inductor.passes.splice import splice_graph
from ember.runtime.ir import (
    Graph,
    InputSpec,
    Node,
    Program,
    SourceLocation,
    TensorMeta,
    ValueRef,
    VerificationError,
    verify,
)
from ember.runtime.logs import log
from ember.runtime.tracing import GraphRecorder

REWRITES_KEY = "rewrites"
"""``program.metadata[REWRITES_KEY]``: pattern family -> rewrites done."""

DROPOUT_OPTION = "attention_dropout"
"""The inductor option that turns the rewrite of attention with dropout off (False)."""

SDPA_CALL = "scaled_dot_product_attention"
"""A ``math_upcast`` match's nodes must come from a source line naming this."""

_NATIVE_DROPOUT = "aten::native_dropout.default"
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_MATMUL_ANCHORS = ("aten::view.default", "aten::_unsafe_view.default", "aten::bmm.default")


class NotRewritten(Exception):
    """A matched attention that must not be rewritten; the message says why."""


def attention_to_sdpa(program: Program, *, dropout: bool = True) -> Program:
    """A copy of ``program`` with hand-written attention replaced by SDPA (see the
    module docstring); ``program`` itself when nothing fires. ``dropout=False`` leaves
    attention with dropout on its probabilities alone (logged)."""
    if "backward" in program.graphs:
        if any(_candidates(g) for g in program.graphs.values()):
            log("patterns", "attention: training program, not rewritten (its backward "
                "was derived from the unfused ops)")
        return program
    result = program.copy()
    count = 0
    for graph in result.graphs.values():
        count += _GraphRewriter(result, graph, dropout).run()
    if not count:
        return program
    rewrites = dict(_rewrites(result))
    rewrites["attention"] = rewrites.get("attention", 0) + count
    result.metadata = {**result.metadata, REWRITES_KEY: rewrites}
    return result


def _rewrites(program: Program) -> dict[str, int]:
    found = program.metadata.get(REWRITES_KEY)
    if not isinstance(found, dict):
        return {}
    return {str(k): int(v) for k, v in found.items() if isinstance(v, int)}


def dropout_enabled(options: Mapping[str, Any]) -> bool:
    """Whether a compile with ``options`` rewrites attention with dropout: the option
    ``attention_dropout`` (default True), never under ``eager_random`` (whose contract
    is eager's random values; SDPA's kernel draws its own)."""
    return bool(options.get(DROPOUT_OPTION, True)) and not options.get("eager_random")


def attention_pass(options: Mapping[str, Any]) -> Callable[[Program], Program]:
    """:func:`attention_to_sdpa` as a compile with ``options`` runs it."""
    if dropout_enabled(options):
        return attention_to_sdpa
    return functools.partial(attention_to_sdpa, dropout=False)


def has_softmax(program: Program) -> bool:
    """Whether ``program`` (any dialect) computes a softmax: the test the aot stage runs
    before decomposing a training forward for this pass (``InductorStage.pre_grad_passes``)."""
    # NOTE: not log_softmax: a loss inside the graph (cross-entropy) is no attention
    return any(n.op == "call" and "softmax" in str(n.target)
               and "log_softmax" not in str(n.target)
               for g in program.graphs.values() for n in g.nodes)


def _candidates(graph: Graph) -> bool:
    return any(n.op == "call" and n.target == "aten::_softmax.default" for n in graph.nodes)


class _GraphRewriter:
    """Rewrites one graph, one match at a time, until no rule fires."""

    def __init__(self, program: Program, graph: Graph, dropout: bool) -> None:
        self.program = program
        self.graph = graph
        self.dropout = dropout
        self.refusals: set[tuple[str, str]] = set()

    def run(self) -> int:
        count = 0
        while _candidates(self.graph) and self._rewrite_one():
            count += 1
        return count

    def _rewrite_one(self) -> bool:
        matcher = Matcher(self.graph, self.program.tensors)
        evaluator = ConstantEvaluator(self.program, matcher.nodes)
        for rule in ATTENTION_PATTERNS:
            anchors = _anchors(rule.pattern)
            for node in list(self.graph.nodes):
                if node.op == "call" and node.target in anchors and \
                        self._try(rule, node, matcher, evaluator):
                    return True
        return False

    def _try(self, rule: AttentionRule, node: Node, matcher: Matcher,
             evaluator: ConstantEvaluator) -> bool:
        refused: tuple[Match, str] | None = None
        for match in matcher.matches_at(node, rule.pattern):
            try:
                _check(rule, match, matcher)
                dropout_p = _dropout_p(match, matcher)
                if dropout_p and not self.dropout:
                    raise NotRewritten(f"dropout (p={dropout_p}) on the probabilities: off "
                                       f"(options {DROPOUT_OPTION}=False or eager_random)")
                replacement, causal = _record_sdpa(rule, match, matcher, evaluator,
                                                   self.graph, dropout_p)
            except NotRewritten as e:
                refused = refused or (match, str(e))
                continue
            out = splice_graph(self.graph, match.anchor, replacement, _inputs(rule, match),
                               set(match.covered), _source(match, matcher))
            fused = next(n.target for n in replacement.nodes if n.target in _FUSED)
            mask = " (a causal mask: is_causal=True)" if causal else ""
            if dropout_p:
                mask += f" with dropout p={dropout_p}"
            log("patterns", f"attention: {rule.name}{mask} at %{node.name}"
                f"{_where(match, matcher)} -> {fused} (%{out.node})")
            return True
        if refused is not None and (node.name, rule.name) not in self.refusals:
            self.refusals.add((node.name, rule.name))
            first, reason = refused
            log("patterns", f"attention: {rule.name} at %{node.name}{_where(first, matcher)} "
                f"not rewritten: {reason}")
        return False


_FUSED = frozenset(op for op in EXTERN_OPS if op.startswith("aten::_scaled_dot_product_")
                   and not op.endswith("_backward.default"))


def _anchors(pattern: Pattern) -> tuple[str, ...]:
    """The targets a node must have for ``pattern`` to match at it."""
    if isinstance(pattern, Op):
        return pattern.targets
    assert isinstance(pattern, Matmul), pattern
    return _MATMUL_ANCHORS


def _check(rule: AttentionRule, match: Match, matcher: Matcher) -> None:
    """Raise NotRewritten when the match breaks a condition of the module docstring."""
    single = matcher.covered_nodes_single_use(match)
    if single is not None:
        raise NotRewritten(single)
    q, k, v, probs = (_meta(matcher, match.value(n)) for n in ("q", "k", "v", "probs"))
    if rule.kind == "math_upcast":
        _check_upcast(match, matcher, q, probs)
        inputs = {m.dtype for m in (q, k, v)}
    else:
        inputs = {m.dtype for m in (q, k, v, probs)}
    if len(inputs) != 1 or probs.dtype not in _FLOATS:
        raise NotRewritten("q, k, v and the softmax do not share one floating dtype "
                           f"({', '.join(sorted(str(d) for d in inputs | {probs.dtype}))})")
    if rule.kind != "written":
        if match.number("zero") != 0.0:
            raise NotRewritten(f"the safe softmax fills {match.number('zero')!r}, not 0")
        if _meta(matcher, match.value("safe")).dtype != probs.dtype:
            raise NotRewritten("the safe softmax changes the softmax's dtype")
    perm = match.bindings["perm"]
    n = k.ndim
    if perm != (*range(n - 2), n - 1, n - 2) and perm != (*range(n - 2), -1, -2):
        raise NotRewritten(f"kᵀ is permute(k, {perm}), not a swap of the last two dims")
    if rule.mask == "none":
        return
    masked = _meta(matcher, match.value("masked"))
    if masked.sizes != probs.sizes or masked.dtype != probs.dtype:
        raise NotRewritten("the mask changes the scores' sizes or dtype")
    if rule.mask == "additive":
        if not isinstance(match.bindings["mask"], ValueRef):
            raise NotRewritten(f"the mask is the number {match.bindings['mask']!r}")
        mask = _meta(matcher, match.value("mask"))
        if mask.dtype not in (probs.dtype, q.dtype):  # NOTE: q's: a math_upcast mask
            raise NotRewritten(f"the additive mask is {mask.dtype}, the scores {probs.dtype}")
        return
    cond = _meta(matcher, match.value("cond"))
    if cond.dtype != torch.bool:
        raise NotRewritten(f"the where condition is {cond.dtype}, not bool")


def _dropout_p(match: Match, matcher: Matcher) -> float:
    """The ``p`` of the match's dropout on the probabilities (0.0 without dropout).

    Raises:
        NotRewritten: the dropout is not SDPA's (attention_patterns.DROPOUT_FORMS).
    """
    found = match.bindings
    if "dropout_mask" not in found:
        return 0.0
    tensors = [what for name, what in (("dropout_p", "p"), ("keep_divisor", "divisor"),
                                       ("keep_scale", "scale")) if f"{name}_tensor" in found]
    if tensors:
        raise NotRewritten(f"the dropout's {tensors[0]} is a tensor, not a number (SDPA's "
                           "dropout_p is a float)")
    if "keep" in found:  # NOTE: bernoulli(1 - p) / (1 - p)
        keep, divisor = match.number("keep"), match.number("keep_divisor")
        if keep != divisor:
            raise NotRewritten(f"dropout keeps with probability {keep!r} but scales by "
                               f"1/{divisor!r}, not 1/{keep!r}")
        p = _shortest(1.0 - keep, lambda d: 1.0 - d == keep)
    else:
        p = match.number("dropout_p")
        native = matcher.nodes[match.value("dropout_mask").node].target == _NATIVE_DROPOUT
        scale = match.number("keep_scale", 1.0)
        # NOTE: float32 rounding of 1/(1 - p) allowed: the kernels scale in float32
        if not native and (p >= 1.0 or abs(scale * (1.0 - p) - 1.0) > 1e-6):
            raise NotRewritten(f"dropout with p={p!r} scales the kept probabilities by "
                               f"{scale!r}, not 1/(1 - p)")
    if not 0.0 <= p < 1.0:
        raise NotRewritten(f"dropout with p={p!r}, not in [0, 1)")
    probs = _meta(matcher, match.value("probs"))
    mask = _meta(matcher, match.value("dropout_mask"))
    if mask.sizes != probs.sizes:
        raise NotRewritten(f"the dropout mask {list(mask.sizes)} is not of the probabilities' "
                           f"sizes {list(probs.sizes)} (SDPA drops each one on its own)")
    if mask.dtype not in (torch.bool, probs.dtype):
        raise NotRewritten(f"the dropout mask is {mask.dtype}, the probabilities {probs.dtype}")
    return p


def _check_upcast(match: Match, matcher: Matcher, q: TensorMeta, probs: TensorMeta) -> None:
    """The casts of a ``math_upcast`` match are SDPA's own (module docstring)."""
    if q.dtype not in (torch.float16, torch.bfloat16) or probs.dtype != torch.float32:
        raise NotRewritten(f"an upcast from {q.dtype} to {probs.dtype} is not SDPA's")
    if match.bindings["out_dtype"] != q.dtype:
        raise NotRewritten(f"the result is cast to {match.bindings['out_dtype']}, "
                           f"not back to {q.dtype}")
    for name in match.covered:
        source = matcher.nodes[name].source
        if source is None or SDPA_CALL not in source.text:
            where = "has no source line" if source is None else f"comes from {source}"
            raise NotRewritten(f"%{name} {where}, not a call of {SDPA_CALL} (an upcast "
                               "written by hand asks for float32 precision)")


def _math_scale(product: float) -> float:
    """SDPA's ``scale`` from the product of its math path's two ``sqrt(scale)`` factors:
    the shortest decimal whose square root squares to ``product`` (the scale the user
    or SDPA's default gave), else ``product``."""
    return _shortest(product, lambda scale: math.sqrt(scale) * math.sqrt(scale) == product)


def _shortest(value: float, gives: Callable[[float], bool]) -> float:
    """The shortest decimal ``d`` near ``value`` for which ``gives(d)`` (``0.1``, not
    ``0.09999999999999998``), else ``value``."""
    for digits in range(1, 18):
        candidate = float(f"{value:.{digits}g}")
        if gives(candidate):
            return candidate
    return value


def _meta(matcher: Matcher, ref: ValueRef) -> TensorMeta:
    meta = matcher.meta(ref)
    if meta is None:
        raise NotRewritten(f"{ref} is not a tensor")
    return meta


def _inputs(rule: AttentionRule, match: Match) -> dict[str, ValueRef]:
    names = ["q", "k", "v"] + {"none": [], "additive": ["mask"]}.get(rule.mask, ["cond"])
    return {name: match.value(name) for name in names}


def _causal(rule: AttentionRule, match: Match, matcher: Matcher,
            evaluator: ConstantEvaluator) -> bool:
    """Whether the rule's mask is a compile-time constant equal to a causal mask."""
    if rule.mask == "none":
        return False
    probs = _meta(matcher, match.value("probs"))
    if not probs.is_static:
        return False
    sizes = tuple(int(s) for s in probs.sizes)
    if rule.mask == "additive":
        mask = evaluator.value(match.value("mask"))
        dtype = _meta(matcher, match.value("mask")).dtype
        return mask is not None and additive_is_causal(mask, sizes, dtype)
    cond = evaluator.value(match.value("cond"))
    if cond is None:
        return False
    return keep_is_causal(cond if rule.mask == "keep" else ~cond, sizes)


def _record_sdpa(rule: AttentionRule, match: Match, matcher: Matcher,
                 evaluator: ConstantEvaluator, graph: Graph,
                 dropout_p: float) -> tuple[Graph, bool]:
    """The graph torch records for SDPA over the matched values (its placeholders are
    named after :func:`_inputs`), and whether the mask became ``is_causal``."""
    causal = _causal(rule, match, matcher, evaluator)
    probs = _meta(matcher, match.value("probs"))
    if rule.mask in ("keep", "drop"):
        # NOTE: a causal mask leaves every row a position, so a fill at the bottom of
        # the dtype's range weighs nothing; other masks need the fill to absorb scores
        fill = match.number("fill")
        ok = (fill <= float(torch.finfo(probs.dtype).min) if causal
              else fills_like_minus_infinity(fill, probs.dtype))
        if not ok:
            raise NotRewritten(f"the mask fills {fill!r}, not -inf or finfo({probs.dtype})"
                               ".min: adding it to the scores is not the same as writing it")
    inputs = _inputs(rule, match)
    dtype = _meta(matcher, match.value("q")).dtype
    if rule.mask == "additive" and not causal and \
            _meta(matcher, match.value("mask")).dtype != dtype:
        raise NotRewritten(f"a {_meta(matcher, match.value('mask')).dtype} mask that is not "
                           f"causal: SDPA over {dtype} inputs would round it to {dtype}")
    if causal:
        inputs = {name: ref for name, ref in inputs.items() if name in ("q", "k", "v")}
    recorder = GraphRecorder(dynamic=bool(graph.symbols))
    fakes = {name: _fake_input(recorder, name, _meta(matcher, ref), graph)
             for name, ref in inputs.items()}
    scale = match.number("scale", 1.0)
    if rule.kind != "written":
        scale = _math_scale(scale)
    with recorder:
        mask = None if causal else _sdpa_mask(rule, match, fakes, probs)
        out = F.scaled_dot_product_attention(
            fakes["q"], fakes["k"], fakes["v"], attn_mask=mask, dropout_p=dropout_p,
            is_causal=causal, scale=scale)
    recorded = recorder.finish([out])
    recorded.dialect = "core-functional"
    replacement = recorded.graphs["forward"]
    if not any(n.target in _FUSED for n in replacement.calls()):
        cpu = "; the CPU's takes no dropout" if dropout_p and probs.device.type == "cpu" else ""
        raise NotRewritten("torch has no fused attention kernel for these inputs (it would "
                           f"run the same unfused ops{cpu})")
    try:
        verify(recorded, "core-functional")
    except VerificationError as e:
        raise NotRewritten(f"torch's SDPA for these inputs is not Core ATen ({e})") from None
    new_guards = [g for g in replacement.guards if g not in graph.guards]
    if new_guards or recorded.tensors or any(
            n.op not in ("placeholder", "call", "output") for n in replacement.nodes):
        raise NotRewritten("SDPA for these inputs adds shape guards or constants")
    return replacement, causal


def _fake_input(recorder: GraphRecorder, name: str, meta: TensorMeta,
                graph: Graph) -> torch.Tensor:
    if recorder.shape_env is not None:
        fake = recorder.add_meta_input(meta, InputSpec(name), graph.symbols)
        if fake.is_leaf:
            fake.requires_grad_(meta.requires_grad and meta.dtype.is_floating_point)
        return fake
    with recorder.fake_mode:
        tensor = torch.empty_strided([int(s) for s in meta.sizes],
                                     [int(s) for s in meta.strides], dtype=meta.dtype,
                                     device=meta.device)
    # NOTE: a training forward's (the aot stage runs this pass before the backward):
    # SDPA then picks a kernel with a backward and keeps what it needs (CUDA: the
    # log-sum-exp an inference call skips)
    tensor.requires_grad_(meta.requires_grad and meta.dtype.is_floating_point)
    return recorder.add_input(tensor, InputSpec(name))


def _sdpa_mask(rule: AttentionRule, match: Match, fakes: dict[str, torch.Tensor],
               probs: TensorMeta) -> torch.Tensor | None:
    """The additive float mask SDPA gets (recorded): the rule's mask, or for a
    ``where`` the same ``where`` with 0 in place of the scores."""
    if rule.mask == "none":
        return None
    if rule.mask == "additive":
        return fakes["mask"]
    aten = torch.ops.aten
    device = fakes["q"].device
    zero = aten.scalar_tensor.default(0.0, dtype=probs.dtype, device=device)
    fill = aten.scalar_tensor.default(match.number("fill"), dtype=probs.dtype, device=device)
    cond = fakes["cond"]
    keep = rule.mask == "keep"
    mask: torch.Tensor = aten.where.self(cond, zero if keep else fill, fill if keep else zero)
    return mask


def _source(match: Match, matcher: Matcher) -> SourceLocation | None:
    probs = matcher.nodes[match.value("probs").node]
    return probs.source if probs.source is not None else match.anchor.source


def _where(match: Match, matcher: Matcher) -> str:
    source = _source(match, matcher)
    if source is None:
        return ""
    return f" ({source}" + (f": {source.text}" if source.text else "") + ")"
