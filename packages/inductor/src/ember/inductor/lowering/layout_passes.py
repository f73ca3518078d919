"""Layout passes of the lowering (run on extern calls, see :mod:`.extern_passes`):
convolutions take channels-last data, and matmul operands read transposed are stored
transposed. The layouts themselves are described in :mod:`.layout`."""

from __future__ import annotations

import dataclasses
from typing import Any

import sympy
from ember.inductor.loop_ir import Add, Var
from ember.inductor.loop_ir.symbolic_index import from_ir, hint, same_size, stride_from_ir
from ember.inductor.lowering.context import ExternRequest, LoweringContext
from ember.inductor.lowering.inlining import MATMUL_TARGETS
from ember.inductor.lowering.layout import (
    channels_last_strides,
    column_major_strides,
    is_channels_last,
    same_layout,
    storage_order,
)
from ember.inductor.lowering.layout_plan_rules import anchors_on_device
from ember.inductor.lowering.values import Lazy, Stored, contiguous_strides, numel, probe_index
from ember.runtime.ir import TensorMeta, symbolic


def channels_last_convolution(ctx: LoweringContext, call: ExternRequest) -> ExternRequest:
    """Lowering pass: a 2-d convolution's input, when a kernel computes it, is stored
    channels-last, and ATen's convolution then returns a channels-last result (the meta
    of the request says so). Vendor convolutions run faster on channels-last data (on
    CPU: no reorder into the blocked format; on the H200 cuDNN ran the zoo's ResNet
    about 1.5x faster in float32 and bfloat16). The weight is passed channels-last too
    when it is computed or saved for the backward (:mod:`.layout_plan`). Other calls
    are returned as they are.
    """
    args, metas = call.args, call.metas
    if call.node.target != "aten::convolution.default":
        return call
    x, meta = args[0], metas[0]
    if (len(args) < 9 or args[6] or not isinstance(meta, TensorMeta)
            or not isinstance(x, (Lazy, Stored)) or len(x.sizes) != 4
            or not meta.dtype.is_floating_point
            or not (anchors_on_device(call.node.target, call.node.args, meta.device.type)
                    or _planned_channels_last(meta))):
        return call
    weight = args[1]
    if isinstance(weight, Lazy) or ctx.layout.saved_channels_last(ctx.program,
                                                                     call.node.args[1]):
        # computed anyway (a cast), or saved channels-last for the backward (the layout
        # plan's clone): the copy made here is the saved one. A row-major weight
        # parameter is passed as it is in inference (one copy a call either way)
        weight = channels_last_operand(ctx, weight)
    args = (channels_last_operand(ctx, x), weight, *args[2:])
    # NOTE: the meta stays in the IR's terms (ints and size-expression text, as every
    # TensorMeta): only its strides change, computed over the loop-IR sizes and printed
    # back (a sympy size in a meta is not IR; ``symbolic.parse`` refuses it)
    return dataclasses.replace(call, args=args, metas=(channels_last_meta(meta),))


def channels_last_convolution_backward(ctx: LoweringContext,
                                       call: ExternRequest) -> ExternRequest:
    """Lowering pass: a 2-d ``convolution_backward`` gets its gradient, input and
    weight channels-last (computed so by the kernels producing them; a stored tensor in
    another layout is copied once), and its input gradient is declared channels-last:
    ATen's backward returns it in its operands' format. A backward handed a row-major
    operand converts all three on every call (cuDNN's ``nchwToNhwc``)."""
    if call.node.target != "aten::convolution_backward.default":
        return call
    args, metas = call.args, call.metas
    if len(args) < 11 or args[7] or not all(
            isinstance(a, (Lazy, Stored)) and len(a.sizes) == 4
            and a.dtype.is_floating_point for a in args[:3]):
        return call
    tensors = [m for m in metas[:2] if isinstance(m, TensorMeta)]
    if tensors and not (
            anchors_on_device(call.node.target, call.node.args, tensors[0].device.type)
            or any(_planned_channels_last(m) for m in tensors)):
        return call  # a dense CPU convolution: its traced layouts (layout_plan_rules)
    new_args = (*(channels_last_operand(ctx, a) for a in args[:3]), *args[3:])
    grad_input = metas[0]
    new_metas = (channels_last_meta(grad_input) if isinstance(grad_input, TensorMeta)
                 else grad_input, *metas[1:])
    return dataclasses.replace(call, args=new_args, metas=new_metas)


def _planned_channels_last(meta: TensorMeta) -> bool:
    """Whether the layout plan made this result channels-last (its traced strides are
    channels-last): a convolution that does not ask for it itself follows the plan."""
    return len(meta.sizes) == 4 and channels_last_meta(meta).strides == meta.strides


def channels_last_meta(meta: TensorMeta) -> TensorMeta:
    """``meta`` (4-d) with channels-last strides."""
    strides = channels_last_strides(tuple(from_ir(s) for s in meta.sizes))
    return dataclasses.replace(meta, strides=tuple(symbolic.format(s) for s in strides))


def channels_last_operand(ctx: LoweringContext, x: Any) -> Any:
    """A 4-d convolution operand in a channels-last buffer (see :func:`channels_last`);
    one already channels-last (or whose channels-last layout is row-major too: a
    ``1x1`` weight) is returned as it is, and so is a non-tensor."""
    if not isinstance(x, (Lazy, Stored)) or len(x.sizes) != 4:
        return x
    if isinstance(x, Stored) and (is_channels_last(x.sizes, x.strides) or same_layout(
            x.sizes, x.strides, channels_last_strides(x.sizes))):
        return x
    return channels_last(ctx, x)


def channels_last(ctx: LoweringContext, x: Lazy | Stored) -> Stored:
    """``x`` in a channels-last buffer: a Lazy is computed into one; a stored tensor
    is copied once (the copy is reused by every later convolution of it)."""
    strides = channels_last_strides(x.sizes)
    if isinstance(x, Lazy):
        return ctx.realize(x, strides=strides, reuse=True)
    key = (x.buffer, x.sizes, x.strides, x.offset)
    copies = ctx.layout.channels_last_copies
    copy = copies.get(key)
    if copy is None:
        copy = ctx.realize(Lazy(x.element, x.dtype, x.sizes), strides=strides)
        copies[key] = copy
    return copy




def transposed_matmul_operands(ctx: LoweringContext, call: ExternRequest) -> ExternRequest:
    """Lowering pass: each operand of a matmul goes through :func:`matmul_operand`."""
    if call.node.target not in MATMUL_TARGETS:
        return call
    return dataclasses.replace(call, args=tuple(matmul_operand(ctx, a) for a in call.args))


def matmul_operand(ctx: LoweringContext, value: Any) -> Any:
    """A computed matmul operand that reads its inputs transposed (a weight
    gradient's ``x.t()`` of an activation computed in the backward) is stored
    transposed: its kernel then reads and writes contiguously (and vectorizes), and
    the matmul takes the transposed view at no cost. The transpose of a computed value
    is a view of that value's buffer, stored in the layout the transpose would have
    been (:func:`transposed_view`). Other values are returned as is."""
    if not isinstance(value, Lazy) or _kept_as_is(ctx, value):
        return value
    n = len(value.sizes)
    transposed = unit_stride_dim(ctx, value) == n - 2
    view = transposed_view(ctx, value, transposed)
    if view is not None:
        return view
    if not transposed:
        return value
    return ctx.realize(value, strides=column_major_strides(value.sizes), reuse=True)


def keeps_matmul_operand(ctx: LoweringContext, value: Any) -> bool:
    """Whether :func:`matmul_operand` returns ``value`` as it is (and stores nothing):
    asked without storing anything (``lowering/matmul_extern.py``)."""
    if not isinstance(value, Lazy) or _kept_as_is(ctx, value):
        return True
    return (_transposed_base(value) is None
            and unit_stride_dim(ctx, value) != len(value.sizes) - 2)


def _kept_as_is(ctx: LoweringContext, value: Lazy) -> bool:
    return (len(value.sizes) not in (2, 3) or ctx.is_realized(value)
            or (1 in value.sizes and 0 not in value.sizes))


def _transposed_base(value: Lazy) -> Lazy | None:
    """The value ``value`` transposes (``base.mT``), or None."""
    n = len(value.sizes)
    swap = (*range(n - 2), n - 1, n - 2)
    if value.permuted_from is None or value.permuted_from[1] != swap:
        return None
    base = value.permuted_from[0]
    if tuple(base.sizes) != tuple(value.sizes[d] for d in swap):
        return None
    return base


def transposed_view(ctx: LoweringContext, value: Lazy, transposed: bool) -> Stored | None:
    """``value`` as a view of the buffer of the value it transposes (``base.mT``), or
    None when it transposes none. A qkv projection's gradient feeds ``dX = g @ W`` and,
    transposed, ``dW = gᵀ @ x``: both read one buffer, not ``g`` and a transposed copy.
    A base not stored yet is stored as ``value`` would have been (``transposed``: ``value``
    column-major, i.e. the base row-major; else the base column-major), and its other
    readers then read that buffer."""
    base = _transposed_base(value)
    if base is None:
        return None
    n = len(value.sizes)
    swap = (*range(n - 2), n - 1, n - 2)
    strides = (contiguous_strides if transposed else column_major_strides)(base.sizes)
    stored = ctx.realize(base) if ctx.is_realized(base) else ctx.realize(
        base, strides=strides, reuse=True)
    return Stored(stored.buffer, stored.dtype, value.sizes,
                  tuple(stored.strides[d] for d in swap), stored.offset)


def unit_stride_dim(ctx: LoweringContext, value: Lazy) -> int | None:
    """The dim of ``value`` along which its largest input is read contiguously
    (its loop variable a plain term of the load's index), if one is."""
    loads = [(numel(ctx.buffers[buf].sizes), ix)
             for buf, ix in ctx.external_loads(value) if buf in ctx.buffers]
    if not loads:
        return None
    _, ix = max(loads, key=lambda t: hint(t[0]))  # symbolic sizes: at their hints
    terms = ix.terms if isinstance(ix, Add) else (ix,)
    for d, v in enumerate(probe_index(value.sizes)):
        if isinstance(v, Var) and v in terms:
            return d
    return None


# Extern ops whose result is laid out like their first operands (attention returns its
# output in the query's dim order): given operands in another layout than traced, their
# results differ from the traced meta and the wrapper copies them into it every call.
LAYOUT_FOLLOWING_EXTERNS = frozenset({
    "aten::_scaled_dot_product_flash_attention_for_cpu.default",
    "aten::_scaled_dot_product_flash_attention.default",
    "aten::_scaled_dot_product_efficient_attention.default",
    "aten::_scaled_dot_product_cudnn_attention.default",
    "aten::scaled_dot_product_attention.default",
})
#: extern ops given their operands in the dense layouts the program traced for them
#: (:func:`traced_layout_operands`): the layout-following ones and their backwards (the
#: kernel an attention op runs was picked for the traced layouts). Fallbacks get the
#: same (:func:`in_traced_layouts`).
TRACED_LAYOUT_EXTERNS = LAYOUT_FOLLOWING_EXTERNS | frozenset({
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward.default",
    "aten::_scaled_dot_product_flash_attention_backward.default",
    "aten::_scaled_dot_product_efficient_attention_backward.default",
    "aten::_scaled_dot_product_cudnn_attention_backward.default",
})


def traced_layout_operands(ctx: LoweringContext, call: ExternRequest) -> ExternRequest:
    """Lowering pass: the computed operands of an op in :data:`TRACED_LAYOUT_EXTERNS`
    are stored in the dense layout the program traced for them (a Llama's rotated
    ``q``/``k`` are ``(batch, seq, heads, dim)`` in memory, viewed as ``(batch, heads,
    seq, dim)``), so that the op's result has the traced layout its consumers were
    lowered for, instead of being copied into it after every call.

    A stored operand in another layout than traced is copied into the traced one: the
    kernel was picked for that layout (SDPA's dispatch chose cuDNN for a mask made
    contiguous, ``attn_mask.contiguous()``; the lowering, which elides the copy of a
    clone, handed cuDNN the transposed input and cuDNN failed on the H200). Arguments
    are matched by position and by keyword (``attn_mask=``)."""
    if call.node.target not in TRACED_LAYOUT_EXTERNS:
        return call
    return in_traced_layouts(ctx, call)


def in_traced_layouts(ctx: LoweringContext, call: ExternRequest) -> ExternRequest:
    """``call`` with its computed tensor operands in the dense layouts the program traced
    for them (see :func:`traced_layout_operands`). The lowering gives every fallback
    this: an op the inductor does not know may depend on its operands' layout, as in
    eager (``view_as_complex`` needs a last dim of stride 1; the backward of
    ``view_as_real`` feeds it ``clone(expand(grad))``, whose copy the lowering elides)."""
    args = [_in_traced_layout(ctx, value, ref)
            for value, ref in zip(call.args, call.node.args)]
    if call.node.target in STORAGE_ADDRESSED and args:
        args[0] = _row_major_at_zero(ctx, args[0], call.node.args[0])
    kwargs = {key: _in_traced_layout(ctx, value, call.node.kwargs.get(key))
              for key, value in call.kwargs.items()}
    return dataclasses.replace(call, args=(*args, *call.args[len(args):]), kwargs=kwargs)


# Ops whose first operand is addressed as memory (sizes, strides and an offset into its
# storage as it lies there at run time), not as elements.
STORAGE_ADDRESSED = frozenset({"aten::as_strided_scatter.default"})


def _row_major_at_zero(ctx: LoweringContext, value: Any, ref: Any) -> Any:
    """``value`` in a fresh row-major buffer, when the program traced it row-major at
    offset 0: the extern addresses its operand's memory, and any buffer the lowering
    already has may be a view of another one (a functional ``clone`` of a view is no
    copy for it) or a graph input, which a caller may pass at any storage offset."""
    meta = ctx.traced_meta(ref)
    if meta is None or meta.storage_offset != 0 or not isinstance(value, (Lazy, Stored)):
        return value
    expected = symbolic.parse(1)
    for size, stride in reversed(list(zip(meta.sizes, meta.strides))):
        if size != 1 and sympy.expand(symbolic.parse(stride) - expected) != 0:
            return value  # traced as a strided view: addressed as it lies
        expected = expected * symbolic.parse(size)
    source = value if isinstance(value, Lazy) else Lazy(value.element, value.dtype, value.sizes)
    return ctx.realize(source, strides=contiguous_strides(value.sizes), reuse=False)


def _in_traced_layout(ctx: LoweringContext, value: Any, ref: Any) -> Any:
    """``value`` (an operand of a layout-following extern) in the dense layout the
    program traced for ``ref``: a Lazy computed into it, a Stored copied into it; as it
    is when it has that layout (or is row-major for a row-major trace, for a Lazy),
    when the traced layout is not dense, or for anything but a tensor."""
    meta = ctx.traced_meta(ref)
    if not isinstance(value, (Lazy, Stored)) or meta is None:
        return value
    if isinstance(value, Lazy) and ctx.is_realized(value):
        return value
    # NOTE: symbolic layouts too: a symbolic program's fallback (an LSTM's
    # mkldnn_rnn_layer) met the permuted input whose traced clone the lowering elides
    sizes = tuple(from_ir(s) for s in meta.sizes)
    strides = tuple(stride_from_ir(s) for s in meta.strides)
    if len(sizes) != len(value.sizes) or not all(
            same_size(a, b) for a, b in zip(sizes, value.sizes)) \
            or storage_order(sizes, strides) is None:
        return value
    if isinstance(value, Stored):
        if same_layout(sizes, value.strides, strides):
            return value
        return ctx.realize(Lazy(value.element, value.dtype, value.sizes), strides=strides)
    if same_layout(sizes, strides, contiguous_strides(sizes)):
        return value
    return ctx.realize(value, strides=strides)
