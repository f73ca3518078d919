"""Forward values that matmuls or convolutions read on both sides of the partition.

A matmul, a convolution or an attention kernel reads its operands from memory: a
forward value such an op reads is written out by the forward graph whatever the
partition decides. When a backward matmul or convolution reads the same value (a
weight's gradient reads the layer's input), recomputing it in the backward graph writes
it to memory a second time and reads it back there, to spare its bytes between the two
graphs. A min cut over saved bytes alone recomputes such values: a batch norm's ReLU
from the saved convolution output, an RMSNorm's output from its input. With
``aot.save_matmul_inputs`` (the default) recomputing one costs twice its bytes in the
cut (:func:`ember.aot.partition.mincut.partition`): its write and its read again, on
top of the bytes saving it costs. The cut then saves it, unless saving it means saving
more: a max pool's output, read by the next convolution, comes with its int64 indices
(four times its bytes in bf16), which the backward also reads; the pool is recomputed.

The test is on storage: a value counts as written by the forward when it, or the value
it is a view of, is an operand of a forward op in
:data:`~ember.aot.partition.mincut.COMPUTE_BOUND_OPS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ember.runtime.ir import Node, ValueRef, is_view

#: ops of the backward graph that read their operands from memory: the forward's
#: compute-bound ops (a gradient is a matmul too) and their own backward ops
BACKWARD_EXTERN_OPS = frozenset({
    "aten::mm.default", "aten::addmm.default", "aten::bmm.default", "aten::baddbmm.default",
    "aten::convolution.default", "aten::convolution_backward.default",
    "aten::_scaled_dot_product_flash_attention_backward.default",
    "aten::_scaled_dot_product_efficient_attention_backward.default",
    "aten::_scaled_dot_product_cudnn_attention_backward.default",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward.default",
})

#: why such a value is saved (``EMBER_LOGS=partition``)
SAVED_FOR_EXTERN = ("a backward matmul or convolution reads it, and a forward one already "
                    "wrote it (aot.save_matmul_inputs)")


def read_by_both(nodes: Mapping[str, Node], tangent_dependent: set[str],
                 fw_required: set[str], forward_externs: frozenset[str]) -> set[ValueRef]:
    """Forward values (not depending on a tangent) whose storage an op of
    :data:`BACKWARD_EXTERN_OPS` depending on a tangent reads, and an op of
    ``forward_externs`` that the forward graph runs reads too. A value read through
    views is named by the value it views (the views are free to recompute); inputs are
    left out (saved or not, they are never recomputed)."""
    written = {_root(nodes, r) for n in _calls(nodes.values(), forward_externs)
               if n.name in fw_required and n.name not in tangent_dependent
               for r in n.inputs()}
    read = {_root(nodes, r) for n in _calls(nodes.values(), BACKWARD_EXTERN_OPS)
            if n.name in tangent_dependent
            for r in n.inputs() if r.node not in tangent_dependent}
    return {r for r in read & written
            if r.node in nodes and nodes[r.node].op == "call" and r.node not in tangent_dependent}


def _calls(nodes: Iterable[Node], targets: frozenset[str]) -> Iterable[Node]:
    return (n for n in nodes if n.op == "call" and n.target in targets)


def _root(nodes: Mapping[str, Node], ref: ValueRef) -> ValueRef:
    """The value whose storage ``ref`` views (``ref`` itself when it is no view)."""
    node = nodes.get(ref.node)
    while node is not None and node.op == "call" and is_view(node.target):
        base = next(iter(node.inputs()), None)
        if base is None:
            break
        ref, node = base, nodes.get(base.node)
    return ref
