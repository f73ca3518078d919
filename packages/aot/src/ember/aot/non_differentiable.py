"""Op outputs that autograd defines as non-differentiable, as a table.

A functional op may return values that eager's autograd never differentiates: BatchNorm's
new running statistics (the buffers it updates in place in eager) are outputs of its
functional form, but ATen's derivative formulas give them no gradient. The aot stage
decomposes such an op before differentiating it, and the decomposition computes the
running statistics from the batch's mean and variance, so they would look
differentiable: a forward output that is such a value takes no tangent
(:func:`ember.aot.retrace.trace_joint`), as in eager. Without the table the backward
took a zero tangent per statistic and added its contribution to the input's gradient
for nothing (two ``torch.zeros`` and extra kernel work every BatchNorm training step).

To add an op: its qualified overload name and the positions of its outputs ATen marks
non-differentiable (``output_differentiability`` in PyTorch's derivative table).
"""

from __future__ import annotations

from ember.runtime.ir import Graph, ValueRef

#: op -> positions of its non-differentiable outputs
NON_DIFFERENTIABLE_OUTPUTS: dict[str, frozenset[int]] = {
    # (output, save_mean, save_rstd, running_mean, running_var)
    "aten::_native_batch_norm_legit_functional.default": frozenset({3, 4}),
    # (output, save_mean, save_invstd, reserve, running_mean, running_var)
    "aten::_batch_norm_with_update_functional.default": frozenset({4, 5}),
}


def non_differentiable_outputs(graph: Graph) -> set[int]:
    """The positions of ``graph``'s outputs that are a non-differentiable output of an op
    in :data:`NON_DIFFERENTIABLE_OUTPUTS`."""
    by_name = {n.name: n for n in graph.nodes}
    found: set[int] = set()
    for i, value in enumerate(graph.output_values):
        if not isinstance(value, ValueRef) or value.index is None:
            continue
        node = by_name.get(value.node)
        if node is not None and node.op == "call" \
                and value.index in NON_DIFFERENTIABLE_OUTPUTS.get(str(node.target), ()):
            found.add(i)
    return found


__all__ = ["NON_DIFFERENTIABLE_OUTPUTS", "non_differentiable_outputs"]
