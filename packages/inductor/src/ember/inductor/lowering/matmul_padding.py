"""Lowering pass: matmuls with unaligned result rows run on zero-padded operands.

A matmul whose result rows are not a multiple of 16 bytes (GPT-2's LM head: 50257
columns) makes cuBLAS fall back to unaligned kernels, 7x slower on the H200. Such a
matmul runs on a right operand (and bias) zero-padded to an aligned width, and its
result is a view of the first ``N`` columns.
"""

from __future__ import annotations

from ember.inductor.codegen.registry import backend_for
from ember.inductor.lowering.context import ExternRequest, LoweringContext
from ember.inductor.lowering.extern_args import ConstantArg, ExternArg, ListArg, TensorArg
from ember.inductor.lowering.values import Lazy, Stored, contiguous_strides, numel
from ember.runtime.ir import TensorMeta

#: the least number of result elements worth a padded copy of the right operand, and the
#: ops padded (which devices pad: their backend's ``pads_unaligned_matmuls``)
PAD_MATMUL_MIN_NUMEL = 1 << 20
PADDABLE_MATMULS = ("aten::mm.default", "aten::addmm.default", "aten::bmm.default")


def padded_width(ctx: LoweringContext, call: ExternRequest) -> int | None:
    """The aligned width the extern ``call`` would run on, or None when it runs as it is
    (aligned, small, or its device's backend does not pad:
    ``KernelBackend.pads_unaligned_matmuls``). A matmul template needs no padding: the
    pad's copies and the strided result are work the template saves."""
    meta = call.metas[0] if len(call.metas) == 1 else None
    if (call.node.target not in PADDABLE_MATMULS
            or not backend_for(ctx.device.type).pads_unaligned_matmuls
            or not isinstance(meta, TensorMeta)
            or not all(isinstance(s, int) for s in meta.sizes)
            or not meta.dtype.is_floating_point):
        return None
    sizes = tuple(int(s) for s in meta.sizes)
    align = max(1, 16 // meta.dtype.itemsize)
    n = sizes[-1]
    if n % align == 0 or numel(sizes) < PAD_MATMUL_MIN_NUMEL:
        return None
    return -(-n // align) * align


def pad_unaligned_matmul(ctx: LoweringContext, call: ExternRequest) -> ExternRequest | Stored:
    """The padded matmul's result (a view of the padded one), or ``call`` as it is when
    :func:`padded_width` says it runs unpadded."""
    node = call.node
    padded_n = padded_width(ctx, call)
    if padded_n is None:
        return call
    meta = call.metas[0]
    assert isinstance(meta, TensorMeta)
    sizes = tuple(int(s) for s in meta.sizes)
    n = sizes[-1]
    count = 3 if node.target == "aten::addmm.default" else 2  # (bias,) a, b
    *bias, a, b = call.args[:count]
    if not all(isinstance(v, (Stored, Lazy)) for v in (a, b, *bias)):
        return call
    dtype = meta.dtype

    def pad(v: Stored | Lazy) -> ExternArg:
        width = [ConstantArg(0), ConstantArg(padded_n - v.sizes[-1])]
        return TensorArg(ctx.extern_step(
            "aten::constant_pad_nd.default",
            [ctx.extern_arg(v), ListArg(tuple(width)), ConstantArg(0.0)], {}, dtype,
            (*v.sizes[:-1], padded_n), node.name,
            f"pads {v.sizes[-1]} columns to {padded_n} for an aligned matmul"))

    operands = [pad(b_) if b_.sizes and b_.sizes[-1] == n else ctx.extern_arg(b_)
                for b_ in bias] + [ctx.extern_arg(a), pad(b)]
    rest = [ctx.extern_arg(x) for x in call.args[count:]]
    kwargs = {k: ctx.extern_arg(v) for k, v in call.kwargs.items()}
    padded_sizes = (*sizes[:-1], padded_n)
    out = ctx.extern_step(node.target, operands + rest, kwargs, dtype, padded_sizes,
                          node.name, f"on {padded_n} columns; the result is a view of the "
                                     f"first {n}")
    return Stored(out, dtype, sizes, contiguous_strides(padded_sizes))


__all__ = ["PADDABLE_MATMULS", "PAD_MATMUL_MIN_NUMEL",
           "pad_unaligned_matmul", "padded_width"]
