"""``requires_grad`` of values torch made below autograd while the recorder ran.

The recorder sees ops at the dispatch level, below autograd, and reads each value's
``requires_grad`` from its fake tensor once recording ends (autograd sets it on the
results of the user's ops). A tensor torch creates *inside* an op never passes through
autograd: torch's conjugate and negative-view fallbacks materialize an argument
(``mul(z, z.conj())`` records ``clone(_conj(z))``, then ``mul``), and that ``clone`` is
recorded without ``requires_grad``. The aot stage treats a value without it as a
constant (a ``no_grad`` region), so the gradient through it was lost: the gradient of
``(z * z.conj()).real`` came out with one of its two terms.

:func:`mark_copies_below_autograd` restores the flag on such copies, recognising them as:

- a call whose result requires grad although none of its tensor arguments does: each
  argument computed from a value that requires grad is marked;
- a :data:`MATERIALIZING_OPS` call recorded with grad mode on, whose argument requires
  grad and whose result is read by a call that requires grad. In a ``no_grad`` region
  (grad mode off when recorded) and after ``detach`` (its argument does not require
  grad) the flag stays off.

The graph is walked backwards, so chains of such copies are marked too.

An in-place op recorded with grad mode off that writes a tensor which requires grad
(``with torch.no_grad(): w.mul_(0.5)``) is hidden from autograd in eager: later reads of
``w`` take their gradient to ``w`` itself. The recorder writes it as eager could have
written it, through ``detach(w)`` (:func:`hidden_write_positions` says which arguments),
which the aot stage knows as a write autograd does not see.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from ember.runtime.ir import Graph, Meta, Node, ScalarMeta, TensorMeta, ValueRef, writes_arguments

from ember.runtime.ir.op_queries import written_positions

#: ops torch's conjugate/negative-view fallbacks run to materialize an argument
MATERIALIZING_OPS = frozenset({
    "aten::clone.default", "aten::_conj_physical.default", "aten::resolve_conj.default",
    "aten::resolve_neg.default", "aten::_neg_view_copy.default", "aten::neg.default",
})

#: never a copy below autograd: it stops gradients (a write through it is hidden)
_DETACH = "aten::detach.default"


def mark_copies_below_autograd(graph: Graph, grad_mode: Mapping[str, bool]) -> None:
    """Set ``requires_grad`` on the copies torch made below autograd (module doc);
    ``grad_mode``: node name -> whether grad mode was on when it was recorded."""
    by_name = {n.name: n for n in graph.nodes}

    def wants_grad(ref: ValueRef) -> bool:
        meta = by_name[ref.node].meta if ref.node in by_name else None
        if isinstance(meta, tuple):
            meta = meta[ref.index or 0]
        return isinstance(meta, TensorMeta) and meta.requires_grad

    def from_grad(producer: Node) -> bool:
        return any(wants_grad(r) for r in producer.inputs() if r.node in by_name)

    for node in reversed(graph.nodes):
        if node.op != "call" or not isinstance(node.meta, TensorMeta) \
                or not node.meta.requires_grad:
            continue
        inputs = [r for r in node.inputs() if r.node in by_name]
        none_wanted = not any(map(wants_grad, inputs))
        for ref in inputs:
            producer = by_name[ref.node]
            if (producer.op != "call" or not isinstance(producer.meta, TensorMeta)
                    or producer.target == _DETACH
                    or producer.meta.requires_grad or not from_grad(producer)):
                continue
            materialized = (producer.target in MATERIALIZING_OPS
                            and grad_mode.get(producer.name, False))
            if none_wanted or materialized:
                producer.meta = dataclasses.replace(producer.meta, requires_grad=True)


def hidden_write_positions(target: str, args: list[Any]) -> list[int]:
    """The positional arguments an in-place call of ``target`` on ``args`` writes without
    autograd seeing it: grad mode is off and the argument requires grad (module doc)."""
    if torch.is_grad_enabled() or not writes_arguments(target):
        return []
    return [i for i in written_positions(target)
            if i < len(args) and isinstance(args[i], torch.Tensor) and args[i].requires_grad]


__all__ = ["MATERIALIZING_OPS", "hidden_write_positions", "mark_copies_below_autograd"]


def with_requires_grad(meta: Meta, result: Any) -> Meta:
    """``meta`` with ``requires_grad`` read from the fake result(s) of its node."""
    if isinstance(meta, tuple) and isinstance(result, (tuple, list)):
        return tuple(_entry_with_requires_grad(m, r) for m, r in zip(meta, result))
    if isinstance(meta, tuple):
        return meta
    return _entry_with_requires_grad(meta, result)


def _entry_with_requires_grad(meta: TensorMeta | ScalarMeta | None,
                              result: Any) -> TensorMeta | ScalarMeta | None:
    if (isinstance(meta, TensorMeta) and isinstance(result, torch.Tensor)
            and meta.requires_grad != result.requires_grad):
        return TensorMeta(meta.dtype, meta.sizes, meta.strides, meta.device,
                          meta.storage_offset, bool(result.requires_grad))
    return meta
