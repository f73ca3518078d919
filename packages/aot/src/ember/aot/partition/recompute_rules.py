"""Which ops the backward graph may recompute instead of reading a saved value.

Recomputing is worth it only for ops a backend fuses into the kernels that read their
results: memory-bound work whose inputs the backward reads anyway. Everything else is
saved. The rule is an allowlist, as a table beside the ops (``RECOMPUTABLE``), plus two
families read from torch's op registry: pointwise ops (torch's ``pointwise`` tag) and
views. An op in neither (a sort, a scan, an FFT, a linear-algebra routine, an adaptive
max pooling or grid sampler that a backend may run as an extern call, an op whose result
depends on the data such as ``nonzero`` or ``.item()``) is saved: recomputing it would
run the whole op twice per step, or sync with the device again.

RNN layers are in the table for another reason: their workspace's real size is not what
fake tensors give it, so the value must not cross from the forward graph to the
backward graph (the layer runs again in the backward, as before this table).

Reductions in the table are recomputed only below ``aot.recompute_reduction_limit``
input elements (:func:`ember.aot.partition.mincut.not_recomputable`); pooling windows
(max and average pools, not adaptive ones) at any size.
"""

from __future__ import annotations

import functools

import torch
from ember.runtime.ir import IRFormatError, is_view, resolve_op

#: op name (``aten::name``, every overload) -> the kind of work, for the reason printed
#: under ``EMBER_LOGS=partition``.
RECOMPUTABLE: dict[str, str] = {
    **{f"aten::{name}": "a factory" for name in (
        "scalar_tensor", "full", "full_like", "zeros", "zeros_like", "ones", "ones_like",
        "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
        "new_empty_strided", "new_zeros", "new_ones", "new_full", "arange",
        "lift_fresh_copy")},
    **{f"aten::{name}": "data movement" for name in (
        "cat", "stack", "clone", "copy", "_to_copy", "contiguous", "constant_pad_nd",
        "reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "replication_pad1d",
        "replication_pad2d", "replication_pad3d", "index", "index_select", "gather",
        "embedding", "slice_scatter", "select_scatter", "diagonal_scatter",
        "as_strided_scatter", "index_put", "scatter", "scatter_add", "index_add",
        "index_copy", "index_fill", "masked_fill", "repeat", "roll", "flip", "tril",
        "triu", "expand_copy", "permute_copy", "view_copy", "_unsafe_view", "alias_copy",
        "pixel_shuffle", "pixel_unshuffle", "col2im", "im2col",
        "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
        "_upsample_nearest_exact1d", "_upsample_nearest_exact2d",
        "_upsample_nearest_exact3d", "upsample_bilinear2d", "_unsafe_index")},
    **{f"aten::{name}": "a reduction" for name in (
        "sum", "mean", "amax", "amin", "max", "min", "var", "var_mean", "std",
        "std_mean", "prod", "argmax", "argmin", "logsumexp", "norm", "linalg_vector_norm",
        "any", "all", "_softmax", "_log_softmax", "native_layer_norm",
        "native_group_norm", "_native_batch_norm_legit_functional",
        "_native_batch_norm_legit_no_training", "_adaptive_avg_pool2d",
        "_adaptive_avg_pool3d")},
    # NOTE: a pooling window is a few elements: recomputing a pool reads its input once,
    # like a pointwise op, whatever the input's size (an adaptive pool's window may be
    # the whole image: a reduction above). Saving a max pool instead keeps its int64
    # indices, four times its bf16 output (0.4 GB in a ResNet-18 step at batch 256)
    **{f"aten::{name}": "a pooling window" for name in (
        "max_pool2d_with_indices", "avg_pool2d", "max_pool3d_with_indices", "avg_pool3d")},
    # NOTE: an RNN layer's workspace has another size than its fake result says (0
    # bytes): saved, it would not match the backward graph's input; recomputed, it never
    # leaves the graph that made it (the cost: the layer runs again in the backward)
    **{f"aten::{name}": "an RNN layer (its workspace's size is known only at run time)"
       for name in ("mkldnn_rnn_layer", "_cudnn_rnn", "miopen_rnn")},
}


@functools.cache
def recompute_kind(target: str) -> str | None:
    """The kind of work ``target`` is when the backward may recompute it (``pointwise``,
    ``a view``, or the table's kind), else None."""
    name = target.split(".", 1)[0]
    if name in RECOMPUTABLE:
        return RECOMPUTABLE[name]
    try:
        op = resolve_op(target)
    except IRFormatError:  # an unregistered op: nothing is known of it, so it is saved
        return None
    if torch.Tag.pointwise in op.tags:
        return "pointwise"
    if is_view(target):
        return "a view"
    return None


def is_reduction(target: str) -> bool:
    """True for an op of the table's reductions (bounded by the reduction limit)."""
    return RECOMPUTABLE.get(target.split(".", 1)[0]) == "a reduction"
