"""User Triton kernels (``ember::triton_kernel``, captured from ``kernel[grid](...)``):
always an extern call, never fused into.

The kernel is the user's own code: the inductor fuses the ops around it but does not
look inside. The wrapper calls the operator (``ember.runtime.user_kernels``), which
launches the user's kernel object, and shows the kernel's source above the call
(``codegen/user_kernels.py``).

A kernel indexes its tensors with the strides the user passed as ints at capture, so
each tensor must reach it in exactly the traced layout: the lowering pass
:func:`user_kernel_operands` stores a computed operand (or a view the lowering made of a
``clone``/``contiguous``) in a buffer with the traced strides.

The pass emits the in-place twin ``ember::triton_kernel_`` on buffers only the call
holds (:mod:`.written_args`), one per written operand: a graph input the program mutates
(``kernel[grid](x, ...)`` on the caller's ``x``) whose old value nothing reads after the
launch (its ``MUTATED_INPUT`` output is then ``argN``: no copy in, none back), a computed
buffer dead after the call (the kernel's ``torch.empty_like`` output: written where it
is, no copy), or else a copy. The call's results are those buffers. A launch whose
operands cannot be owned that way (a written tensor also passed elsewhere, a copy that
could not have the traced layout) keeps the functional operator and its copies.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

from ember.inductor.lowering.layout import in_traced_layout, is_dense
from ember.inductor.lowering.registry import extern
from ember.inductor.lowering.values import Stored
from ember.inductor.lowering.written_args import (
    can_write_in_place,
    describe_writes,
    own_written,
)
from ember.runtime.ir import TensorMeta, ValueRef
from ember.runtime.user_kernels import IN_PLACE_TARGET, TARGET, parse_call

if TYPE_CHECKING:  # NOTE: lowering.context imports buffers, which imports this package
    from ember.inductor.lowering.context import ExternRequest, LoweringContext
    from ember.inductor.lowering.graph_lowering import GraphLowering

NOTE = "user Triton kernel"
"""The note of an in-place launch (output code, printed graph)."""

__all__ = ["user_kernel_operands"]

extern(TARGET)


def user_kernel_operands(ctx: LoweringContext, call: ExternRequest
                         ) -> ExternRequest | tuple[Stored, ...]:
    """Lowering pass: each tensor operand of a user Triton kernel in the sizes and
    strides the program traced for it (a Lazy value, or a stored view with other
    strides, is computed into a buffer of that layout); a launch that may write a
    mutated graph input in place is emitted as such and its results returned (module
    docstring). Other calls are returned as they are."""
    if call.node.target != TARGET or len(call.args) < 2:
        return call
    refs, values = call.node.args[1], call.args[1]
    if not isinstance(refs, tuple) or not isinstance(values, tuple):
        return call
    laid_out: list[object] = []
    seen: dict[object, object] = {}  # one tensor passed twice stays one buffer
    for ref, value in zip(refs, values):
        if ref in seen:
            laid_out.append(seen[ref])
            continue
        seen[ref] = in_traced_layout(ctx, ref, value)
        laid_out.append(seen[ref])
    call = dataclasses.replace(call, args=(call.args[0], tuple(laid_out), *call.args[2:]))
    lowering = cast("GraphLowering", ctx)  # NOTE: the one context the passes run in
    if _launch_in_place(lowering, call, refs):
        return _emit_in_place(lowering, call, refs)
    return call


def _launch_in_place(ctx: GraphLowering, call: ExternRequest, refs: tuple[Any, ...]) -> bool:
    """Whether to launch ``call`` on buffers it owns (each written operand's own buffer
    where it may be written in place: a graph input the program mutates, or a computed
    buffer such as the kernel's ``torch.empty_like`` output, dead after the call; else a
    copy): every written operand is passed only where the launch had that tensor (its
    ``same`` group), and one that needs a copy has a dense traced layout."""
    launch = parse_call(str(call.node.args[3]))
    values = call.args[1]
    for w in launch.writes:
        ref, value = refs[w], values[w]
        group = _group(launch.same, w)
        if not isinstance(ref, ValueRef) or any(
                r == ref and i not in group for i, r in enumerate(refs)):
            return False
        if isinstance(value, Stored) and can_write_in_place(ctx, call.node, ref, value,
                                                             fresh=False):
            continue
        meta = ctx.traced_meta(ref)
        if not isinstance(meta, TensorMeta) or not all(
                isinstance(s, int) for s in (*meta.sizes, *meta.strides)) or not is_dense(
                tuple(int(s) for s in meta.sizes), tuple(int(s) for s in meta.strides)):
            return False  # a copy could not have the layout the kernel indexes
    return True


def _emit_in_place(ctx: GraphLowering, call: ExternRequest, refs: tuple[Any, ...]
                   ) -> tuple[Stored, ...]:
    """Emit ``call`` as the in-place launch; returns its results (the owned buffers)."""
    from ember.inductor.buffers import ExternCall
    from ember.inductor.lowering.extern_args import extern_reads

    node = call.node
    launch = parse_call(str(node.args[3]))
    tensors = list(call.args[1])
    buffers: list[str] = []
    owned: dict[int, Stored] = {}
    for w in launch.writes:
        if w in owned:
            continue
        value = own_written(ctx, node, refs[w], tensors[w], buffers, fresh=False)
        for i in _group(launch.same, w):
            owned[i] = value
            tensors[i] = value
    args = [ctx.extern_arg(a) for a in (call.args[0], tuple(tensors), *call.args[2:])]
    ctx.nodes.append(ExternCall(IN_PLACE_TARGET, args, {}, [ctx.fresh()], [None],
                                extern_reads(args, {}), origins=(node.name,),
                                note=f"{NOTE}, {describe_writes(ctx, buffers)}",
                                mutates=tuple(dict.fromkeys(buffers))))
    return tuple(owned[w] for w in launch.writes)


def _group(same: tuple[tuple[int, ...], ...], index: int) -> set[int]:
    """The operand positions that were one tensor with ``index`` at the launch."""
    for group in same:
        if index in group:
            return set(group) | {index}
    return {index}
