"""Forward values that a convolution or a matmul reads on both sides of the partition.

A convolution or a matmul reads its operands from memory: a forward value it reads is
written out by the forward graph whatever the partition decides. When the backward's
convolution or matmul reads the same value (the weight's gradient reads the layer's
input), recomputing it in the backward graph writes it to memory a second time and reads
it back there, to spare its bytes between the two graphs. A min cut over saved bytes alone
recomputes such values: a batch norm's ReLU from the saved convolution output, a GPT's
GELU from the saved matmul result it is computed from. With ``aot.save_conv_inputs`` (the
default; the name predates matmuls) recomputing one costs twice its bytes in the cut
(:func:`ember.aot.partition.mincut.partition`): its write and its read again, on top of
the bytes saving it costs. The cut then saves it, unless saving it means saving more: a
max pool's output, read by the next convolution, comes with its int64 indices (four
times its bytes in bf16), which the backward also reads; the pool is recomputed.

Which backward ops count is a table (:data:`BACKWARD_EXTERN_OPS`), kept to what was
measured to pay (H100, bf16 training, ``tools/gpu/ab_matmul_choice.py``): a resnet's step
6% faster with the convolution, a torchvision ResNet-18's 4%; with the matmul, gpt's step
2.8% faster (0.978x to 1.003x of torch.compile's, peak 6,276 to 7,430 MiB against
torch.compile's 7,457: torch.compile saves the same values), hf_gpt2 level. Before the
matmul paid, the forward computed each saved GELU twice (the inductor's
``views.reshaped_bases`` stores it once now).

The test is on storage: a value counts as written by the forward when it, or the value
it is a view of, is an operand of a forward op in
:data:`~ember.aot.partition.mincut.COMPUTE_BOUND_OPS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ember.runtime.ir import Node, ValueRef, is_view

#: ops of the backward graph whose operands, read from memory, are saved rather than
#: recomputed when the forward wrote them (see the module doc for why only these)
BACKWARD_EXTERN_OPS = frozenset({"aten::convolution_backward.default", "aten::mm.default"})

#: why such a value is saved (``EMBER_LOGS=partition``)
SAVED_FOR_EXTERN = ("a backward convolution or matmul reads it, and a forward one already "
                    "wrote it (aot.save_conv_inputs)")


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
    return {r for r in read & written if r.node in nodes and nodes[r.node].op == "call"}


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
