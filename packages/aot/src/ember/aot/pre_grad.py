"""The later stages' rewrites of a training program, run before its backward is derived.

A backend stage may ask for rewrites of the forward before the aot stage differentiates
it (``Stage.pre_grad_passes``; the pipeline passes them in ``options``): the inductor's
attention rewrite turns hand-written attention into SDPA, whose backward is then SDPA's
fused backward instead of the unfused ops' (which save the softmax's probabilities, an
``[.., L, S]`` tensor per attention).

The passes see the forward decomposed to Core ATen, as an inference program (one
``forward`` graph). When none changes it, the training pipeline goes on from the
functional program as before. When one does, the backward is derived from the rewritten
forward. That re-trace ran without autograd, so which values require grad is worked out
again from the inputs: a value requires grad when one of its tensor inputs does (and it
is floating point, not an output ATen calls non-differentiable, and not the result of a
``*_like`` factory or ``detach``: :data:`NEVER_REQUIRE_GRAD`). This is exactly
what the capture saw only when the program has no region that stops gradients
(``torch.no_grad()``, ``detach``), so a program with one is not rewritten (logged).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ember.aot.config import AotConfig
from ember.aot.non_differentiable import NON_DIFFERENTIABLE_OUTPUTS
from ember.runtime.ir import Graph, Node, Program, ScalarMeta, TensorMeta, ValueRef
from ember.runtime.ir.graph import Meta
from ember.runtime.logs import log


#: ops whose results never require grad although a tensor argument does: factories
#: that take only its sizes, dtype and device, and ``detach``
NEVER_REQUIRE_GRAD = frozenset({
    "aten::detach.default",
    "aten::empty_like.default", "aten::zeros_like.default", "aten::ones_like.default",
    "aten::full_like.default", "aten::rand_like.default", "aten::randn_like.default",
    "aten::randint_like.default", "aten::randint_like.low_dtype",
    "aten::new_empty.default", "aten::new_empty_strided.default",
    "aten::new_zeros.default", "aten::new_ones.default", "aten::new_full.default",
})


def rewritten_before_grad(functional: Program, config: AotConfig,
                          decompose: Callable[[Program], Program]) -> Program:
    """``functional`` decomposed (``decompose``) and rewritten by those of ``config``'s
    pre-grad passes that apply to it, or ``functional`` itself when none applies or
    changes it (or it stops gradients somewhere: module doc)."""
    passes = [p for p in config.pre_grad_passes if p.applies(functional)]
    if not passes or not config.decompose:
        return functional
    stopped = gradient_stop(functional.forward)
    if stopped is not None:
        log("patterns", f"pre-grad passes not run: %{stopped} stops gradients (a "
                        "no_grad region or a detach), which a re-derived requires_grad "
                        "would not keep")
        return functional
    wants_grad = {p.name: p.meta.requires_grad for p in functional.forward.placeholders
                  if isinstance(p.meta, TensorMeta)}
    decomposed = decompose(functional)
    # NOTE: before the passes too: a pass records its replacement for inputs that
    # require grad (CUDA's SDPA then keeps the log-sum-exp its backward needs)
    propagate_requires_grad(decomposed.forward, wants_grad)
    rewritten = decomposed
    for p in passes:
        rewritten = p.run(rewritten)
    if rewritten is decomposed:
        return functional
    propagate_requires_grad(rewritten.forward, wants_grad)
    return rewritten


def _requires_grad(graph_nodes: dict[str, Node], ref: ValueRef) -> bool:
    node = graph_nodes.get(ref.node)
    meta = node.meta if node is not None else None
    if isinstance(meta, tuple):
        meta = meta[ref.index or 0]
    return isinstance(meta, TensorMeta) and meta.requires_grad


def _differentiable(meta: TensorMeta) -> bool:
    return meta.dtype.is_floating_point or meta.dtype.is_complex


def _derived(node: Node, nodes: dict[str, Node]) -> Meta:
    """``node``'s meta with ``requires_grad`` derived from its inputs."""
    inputs = str(node.target) not in NEVER_REQUIRE_GRAD and any(
        _requires_grad(nodes, r) for r in node.inputs())
    never = NON_DIFFERENTIABLE_OUTPUTS.get(str(node.target), frozenset())

    def one(meta: TensorMeta | ScalarMeta | None, index: int) -> TensorMeta | ScalarMeta | None:
        if not isinstance(meta, TensorMeta):
            return meta
        wanted = inputs and _differentiable(meta) and index not in never
        return dataclasses.replace(meta, requires_grad=wanted)

    if isinstance(node.meta, tuple):
        return tuple(one(m, i) for i, m in enumerate(node.meta))
    return one(node.meta, 0)


def _first(meta: Meta) -> Meta:
    """A tuple meta's first result (the one ATen differentiates; the others are often
    statistics it does not: layer norm's mean and rstd, attention's log-sum-exp)."""
    return meta[0] if isinstance(meta, tuple) and meta else meta


def gradient_stop(graph: Graph) -> str | None:
    """The first node whose captured ``requires_grad`` (of its first result) is not
    what its inputs give (a value computed under ``no_grad``), or None. Results past
    the first may require grad in the re-derived metas where eager's do not: the
    interpreter then runs them with grad enabled, and autograd gives them what it gives."""
    nodes = {n.name: n for n in graph.nodes}
    for node in graph.nodes:
        if node.op == "call" and _first(node.meta) != _first(_derived(node, nodes)):
            return node.name
    return None


def propagate_requires_grad(graph: Graph, inputs: dict[str, bool]) -> None:
    """Set ``requires_grad`` on ``graph``'s placeholders from ``inputs`` (by name) and on
    every call from its inputs, in order."""
    for p in graph.placeholders:
        if isinstance(p.meta, TensorMeta):
            p.meta = dataclasses.replace(p.meta, requires_grad=inputs.get(p.name, False)
                                         and _differentiable(p.meta))
    nodes = {n.name: n for n in graph.nodes}
    for node in graph.nodes:
        if node.op == "call":
            node.meta = _derived(node, nodes)


__all__ = ["NEVER_REQUIRE_GRAD", "gradient_stop", "propagate_requires_grad", "rewritten_before_grad"]
