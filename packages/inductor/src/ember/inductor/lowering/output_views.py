"""User outputs that are views of computed values keep eager's strides.

``(x * 2)[:, ::2]``, ``(x + 1).expand(3, 4)`` and ``(x * 3).diagonal()`` are views in
eager: strides ``(4, 2)``, ``(0, 1)`` and ``(5,)``, over a buffer holding the whole
computed value. Their lowered values are :class:`~.values.Lazy` (a view of a value not
yet in memory is index arithmetic), and realizing one gives a dense buffer: the right
elements with other strides than eager's, which code that reads ``.stride()``, writes
through the result or calls ``.view`` on it can tell apart.

:func:`eager_view` gives such an output eager's layout instead: it stores the computed
value the view chain starts from in its traced layout and applies the chain's view rules
(:data:`OUTPUT_VIEW_OPS`) to that buffer, which makes them :class:`~.values.Stored`
views. Only user outputs whose traced layout is not dense are rebuilt this way (a dense
one is realized in its traced strides directly, and costs no more than eager's); values
saved for the backward are left compact (a saved slice keeps only its elements alive).
A chain that starts at a graph input, or a rule that gives no ``Stored`` view, or one
whose layout is not the traced one, leaves the output as it was: realized densely.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ember.inductor.loop_ir.symbolic_index import same_size
from ember.inductor.lowering.layout import is_dense, meta_layout, same_layout
from ember.inductor.lowering.registry import LOWERINGS, NotLowerable
from ember.inductor.lowering.values import Lazy, Stored
from ember.runtime.ir import OutputKind, TensorMeta, ValueRef

#: view ops an output's chain is rebuilt through: each rule, given a ``Stored`` input,
#: returns a ``Stored`` view of its buffer (tested for every entry)
OUTPUT_VIEW_OPS: frozenset[str] = frozenset({
    "aten::expand.default",
    "aten::slice.Tensor",
    "aten::select.int",
    "aten::diagonal.default",
    "aten::permute.default",
    "aten::t.default",
    "aten::transpose.int",
    "aten::unfold.default",
    "aten::view.default",
    "aten::_unsafe_view.default",
    "aten::squeeze.dim",
    "aten::squeeze.dims",
    "aten::squeeze.default",
    "aten::unsqueeze.default",
    "aten::split.Tensor",
    "aten::split_with_sizes.default",
    "aten::unbind.int",
})

_MAX_CHAIN = 16


def eager_view(ctx: Any, index: int, ref: ValueRef, meta: TensorMeta) -> Stored | None:
    """Graph output ``index`` (``ref``, traced as ``meta``) as a view with eager's sizes,
    strides and storage offset of a buffer holding the value its view chain starts from,
    or None where the output is not a user output with a non-dense traced layout, or its
    chain cannot be rebuilt that way."""
    sizes, strides, offset = meta_layout(meta)
    if is_dense(sizes, strides) or not _user_output(ctx, index):
        return None
    view = _rebuilt(ctx, ref, _MAX_CHAIN)
    if (view is None or len(view.sizes) != len(sizes)
            or not all(same_size(a, b) for a, b in zip(view.sizes, sizes))
            or not same_layout(sizes, view.strides, strides)
            or not same_size(view.offset, offset)):
        return None
    # NOTE: a size-1 dim's stride is eager's too (same_layout lets it be anything)
    return dataclasses.replace(view, strides=tuple(strides))


def _user_output(ctx: Any, index: int) -> bool:
    specs = ctx.program.signature.outputs.get(ctx.graph_name) or []
    return 0 <= index < len(specs) and specs[index].kind == OutputKind.USER_OUTPUT


def _rebuilt(ctx: Any, ref: ValueRef, depth: int) -> Stored | None:
    """``ref``'s value as a ``Stored`` over a buffer this graph computes: a view op's
    rule applied to its rebuilt input, or a computed value realized in its traced layout
    (when that is dense). None for graph inputs and anything else."""
    node = ctx.graph.node(ref.node)
    value = ctx.read_arg(ref)
    if isinstance(value, Stored):
        kind = ctx.buffers[value.buffer].kind if value.buffer in ctx.buffers else "input"
        return value if kind not in ("input", "constant") else None
    if depth <= 0 or not isinstance(value, Lazy):
        return None
    if node.target in OUTPUT_VIEW_OPS and node.args and isinstance(node.args[0], ValueRef):
        base = _rebuilt(ctx, node.args[0], depth - 1)
        if base is None:
            return None
        args = tuple(ctx.read_arg(a) for a in node.args[1:])
        kwargs = {k: ctx.read_arg(v) for k, v in node.kwargs.items()}
        try:
            result = LOWERINGS[node.target](ctx, node, base, *args, **kwargs)
        except NotLowerable:
            return None
        if isinstance(result, tuple):
            result = result[ref.index] if ref.index is not None else None
        return result if isinstance(result, Stored) else None
    meta = ctx.traced_meta(ref)
    if meta is None:
        return None
    sizes, strides, _ = meta_layout(meta)
    if not is_dense(sizes, strides) or tuple(sizes) != tuple(value.sizes):
        return None
    stored: Stored = ctx.realize(value, strides=tuple(strides), origin=node.name)
    return stored
