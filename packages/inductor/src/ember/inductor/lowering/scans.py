"""Lowering of ``cumsum`` and ``cumprod``: a masked sum (product) along a short dim.

``out[..., i, ...] = sum(x[..., j, ...] for j <= i)``, one reduction over a new
innermost dim ``j`` of the scanned dim's length ``L``, the terms past ``i`` masked to
the reduction's identity (:data:`SCANS`: 0, or 1 for the product).
That is ``L`` times the work of a sequential scan but one fused reduction kernel: its
producers (``attention_mask.ne(0)``) run in its loads and its consumers (position ids:
``* mask - 1``) in its epilogue, where eager's scan is a kernel of its own. HF GPT-2's
and Llama's position ids (``L = 512``) were the one fallback of their training steps.

Which devices lower it, and up to which ``L``, is their backend's
``max_scan_length`` (Triton 1024: ``L**2`` additions a row are nothing on a GPU; the
CPU's C++: none, eager's sequential scan is faster there). Longer or symbolic dims, and
other devices, keep eager's ``cumsum`` (a counted fallback, with the reason).

Floating sums and products accumulate in float32 (bfloat16/float16) or their own dtype, in a tree
order: results differ from eager's sequential ones by rounding, as a ``sum`` does.
"""

from __future__ import annotations

from typing import Any

import torch
from ember.inductor.codegen.registry import backend_for
from ember.inductor.loop_ir import IndexExpr
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.common import (
    as_lazy,
    cast_to,
    compute_dtype,
    normalize_dim,
    out_meta,
)
from ember.inductor.lowering.reductions import reduce
from ember.inductor.lowering.registry import NotLowerable, lowering
from ember.inductor.lowering.values import TensorValue
from ember.runtime.ir import Node


#: each scan op: the reduction it runs and that reduction's identity (a masked term)
SCANS: dict[str, tuple[str, int]] = {
    "aten::cumsum.default": ("sum", 0),
    "aten::cumprod.default": ("prod", 1),
}


@lowering(*SCANS)
def _scan(ctx: Any, node: Node, x: TensorValue, dim: int, *, dtype: Any = None) -> Any:
    op, identity = SCANS[node.target]
    name = node.target.removeprefix("aten::").removesuffix(".default")
    meta = out_meta(node)
    if not x.sizes:  # a 0-d tensor: its own running sum (product)
        return cast_to(as_lazy(x), meta.dtype)  # a new value, never the input itself
    d = normalize_dim(dim, len(x.sizes))
    length = x.sizes[d]
    limit = backend_for(ctx.device.type).max_scan_length
    if limit is None:
        raise NotLowerable(f"{name} on {ctx.device.type}: eager's sequential scan")
    if not isinstance(length, int) or length > limit:
        raise NotLowerable(f"{name} over a dim of {length} elements (a masked {op} up "
                           f"to {limit})")
    acc = compute_dtype(meta.dtype)
    full = (*x.sizes, length)

    def term(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        *out, j = index
        at_j = tuple(j if k == d else v for k, v in enumerate(out))
        value = b.cast(x.element(b, at_j), acc)
        kept = b.compute("le", b.index_value(j), b.index_value(out[d]))
        return b.compute("where", kept, value, b.literal(identity, acc))

    return cast_to(reduce(ctx, node, op, term, full, (len(x.sizes),), False, acc), meta.dtype)
