"""Ember's own decompositions, for ops torch registers none for but which are not in the
Core ATen opset. One function per op, registered next to it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from ember.aot._torch import OpOverload
from ember.aot.resample_grad_decompositions import RESAMPLE_GRAD_DECOMPOSITIONS
from ember.aot.transformer_decompositions import TRANSFORMER_DECOMPOSITIONS

# NOTE: the transformer fast-path ops (``_native_multi_head_attention``,
# ``_transformer_encoder_layer_fwd``) and the backward ops of nearest upsampling and
# replication padding are in their own modules
EMBER_DECOMPOSITIONS: dict[OpOverload, Callable[..., Any]] = {
    **TRANSFORMER_DECOMPOSITIONS, **RESAMPLE_GRAD_DECOMPOSITIONS}


def register(op: OpOverload) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        EMBER_DECOMPOSITIONS[op] = fn
        return fn
    return wrap


@register(torch.ops.aten.empty_permuted.default)
def empty_permuted(size: list[int], physical_layout: list[int], *, dtype: Any = None,
                   layout: Any = None, device: Any = None, pin_memory: Any = None) -> Any:
    """An uninitialised tensor whose dimensions lie in memory in ``physical_layout``
    order: ``empty_strided`` with the strides that order implies (a symbolic size stays
    symbolic: ``int()`` of it would specialise the program to the example size)."""
    strides: list[Any] = [0] * len(size)
    step: Any = 1
    for dim in reversed(physical_layout):
        strides[dim] = step
        step = step * torch.sym_max(size[dim], 1)  # type: ignore[no-untyped-call]
    return torch.ops.aten.empty_strided.default(
        size, strides, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)


def _shift_amount(x: torch.Tensor, other: Any) -> int | None:
    """``other`` as a shift in ``[0, bits)`` of ``x``'s integer dtype, else None."""
    if isinstance(other, bool) or not isinstance(other, int):
        return None
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        return None
    bits = torch.iinfo(x.dtype).bits
    return other if 0 <= other < bits else None


@register(torch.ops.aten.__lshift__.Scalar)
@register(torch.ops.aten.bitwise_left_shift.Tensor_Scalar)
def left_shift_by_int(x: torch.Tensor, other: Any) -> Any:
    """``x << s`` = ``x * 2**s`` in two's complement (no shift op is Core ATen)."""
    shift = _shift_amount(x, other)
    if shift is None:
        return NotImplemented
    return torch.ops.aten.mul.Tensor(x, 1 << shift)


@register(torch.ops.aten.__rshift__.Scalar)
@register(torch.ops.aten.bitwise_right_shift.Tensor_Scalar)
def right_shift_by_int(x: torch.Tensor, other: Any) -> Any:
    """``x >> s`` = ``floor(x / 2**s)`` (an arithmetic shift for signed integers). A
    signed shift by the width less one is the sign (-1 or 0): its divisor ``2**s`` is
    past the dtype's range."""
    shift = _shift_amount(x, other)
    if shift is None:
        return NotImplemented
    aten = torch.ops.aten
    if x.dtype.is_signed and shift == torch.iinfo(x.dtype).bits - 1:
        negative = aten._to_copy.default(aten.lt.Scalar(x, 0), dtype=x.dtype)
        return aten.neg.default(negative)
    return aten.div.Tensor_mode(x, 1 << shift, rounding_mode="floor")


@register(torch.ops.aten.max.default)
def max_of_all(x: torch.Tensor) -> Any:
    """The largest element: ``amax`` over every dimension (both propagate NaN)."""
    return torch.ops.aten.amax.default(x, list(range(x.dim())))


@register(torch.ops.aten.min.default)
def min_of_all(x: torch.Tensor) -> Any:
    """The smallest element: ``amin`` over every dimension (both propagate NaN)."""
    return torch.ops.aten.amin.default(x, list(range(x.dim())))


def _nan_ignoring(pick: Callable[..., Any], a: torch.Tensor, b: torch.Tensor) -> Any:
    """``pick(a, b)``, except that where one side is NaN the other side is the result
    (NaN only where both are)."""
    both = pick(a, b)
    if not (a.dtype.is_floating_point or b.dtype.is_floating_point):
        return both
    aten = torch.ops.aten
    take_a = aten.where.self(aten.isnan.default(a), b, both)
    return aten.where.self(aten.isnan.default(b), a, take_a)


def fma(a: Any, b: Any, c: Any) -> Any:
    """``prims.fma``: ``a * b + c``. Dynamo writes ``addcmul_`` (an Adam or RMSprop step)
    as ``prims.fma(t1 * t2, value, self)`` to match the inductor's numerics; a prims op
    is no Core ATen op (:func:`late_decompositions` registers it). The kernels compute
    it in one expression (two roundings in the generated code where the compiler does
    not contract it, one in eager's kernel)."""
    aten = torch.ops.aten
    if isinstance(a, torch.Tensor):
        product = aten.mul.Tensor(a, b)
    elif isinstance(b, torch.Tensor):
        product = aten.mul.Tensor(b, a)
    else:
        product = a * b
    if isinstance(product, torch.Tensor):
        return aten.add.Tensor(product, c)
    return aten.add.Tensor(c, product)


@register(torch.ops.aten.fmax.default)
def fmax(a: torch.Tensor, b: torch.Tensor) -> Any:
    """``maximum`` that ignores NaN: where one operand is NaN, the other one."""
    return _nan_ignoring(torch.ops.aten.maximum.default, a, b)


@register(torch.ops.aten.fmin.default)
def fmin(a: torch.Tensor, b: torch.Tensor) -> Any:
    """``minimum`` that ignores NaN: where one operand is NaN, the other one."""
    return _nan_ignoring(torch.ops.aten.minimum.default, a, b)


@register(torch.ops.aten.addbmm.default)
def addbmm(x: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, *,
           beta: Any = 1, alpha: Any = 1) -> Any:
    """``beta * x + alpha * sum_b(batch1[b] @ batch2[b])`` (with ``beta == 0``, ``x``
    is ignored, NaN included, as eager does)."""
    aten = torch.ops.aten
    if not (batch1.dtype.is_floating_point or batch1.dtype.is_complex):
        # NOTE: eager truncates the scalars to the integer dtype (beta=0.6 is 0)
        beta, alpha = int(beta), int(alpha)
    if batch1.dtype in (torch.bfloat16, torch.float16):
        # NOTE: eager accumulates over the batch in float32 and rounds once
        wide = aten.sum.dim_IntList(aten.bmm.default(
            aten._to_copy.default(batch1, dtype=torch.float32),
            aten._to_copy.default(batch2, dtype=torch.float32)), [0])
        products = aten._to_copy.default(wide, dtype=batch1.dtype)
    else:
        products = aten.sum.dim_IntList(aten.bmm.default(batch1, batch2), [0])
    if alpha != 1:
        products = aten.mul.Tensor(products, alpha)
    if beta == 0:
        return products
    scaled = x if beta == 1 else aten.mul.Tensor(x, beta)
    return aten.add.Tensor(scaled, products)



def _linear_weights(out_size: Any, in_size: Any, align_corners: bool, scale: Any,
                    dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``[out_size, in_size]``: the weights with which 1-d linear interpolation reads
    each input position for each output position (ATen's source index: corners
    aligned, or the pixel centre ``(i + 0.5) / scale - 0.5`` clamped at 0)."""
    i = torch.arange(out_size, dtype=dtype, device=device)
    if align_corners:
        src = i * ((in_size - 1) / (out_size - 1) if out_size > 1 else 0.0)
    else:
        step = 1.0 / scale if scale is not None and scale > 0 else in_size / out_size
        src = ((i + 0.5) * step - 0.5).clamp_min(0)
    low = src.floor()
    frac = (src - low).unsqueeze(1)
    low_i = low.to(torch.int64).unsqueeze(1)
    high_i = (low_i + 1).clamp_max(in_size - 1)
    cols = torch.arange(in_size, device=device)
    return ((cols == low_i).to(dtype) * (1 - frac)  # low == high at the edge: both add
            + (cols == high_i).to(dtype) * frac)


@register(torch.ops.aten.upsample_bilinear2d_backward.default)
def upsample_bilinear2d_backward(grad: torch.Tensor, output_size: Any, input_size: Any,
                                 align_corners: bool, scales_h: Any = None,
                                 scales_w: Any = None) -> Any:
    """The forward is ``Wh @ x @ Ww^T`` per image (``Wh``/``Ww``: the interpolation
    weights of each axis), so the gradient is ``Wh^T @ grad @ Ww``: two matmuls,
    accumulated in float32 for float16/bfloat16 as eager does."""
    if len(input_size) != 4 or not grad.dtype.is_floating_point:
        return NotImplemented
    acc = torch.float32 if grad.dtype in (torch.float16, torch.bfloat16) else grad.dtype
    wh = _linear_weights(output_size[0], input_size[2], align_corners, scales_h, acc,
                         grad.device)
    ww = _linear_weights(output_size[1], input_size[3], align_corners, scales_w, acc,
                         grad.device)
    out = torch.matmul(torch.matmul(wh.t(), grad.to(acc)), ww)
    return out.to(grad.dtype).contiguous()


def _multilabel_pairs(x: torch.Tensor, target: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                 torch.Tensor]:
    """Of ``multilabel_margin_loss`` rows (``x`` as ``[n, classes]``): each slot's label
    (0 past the row's first ``-1``), whether the slot is counted (before that ``-1``),
    whether each class is a target, each (slot, class) pair's margin ``1 - x[label] +
    x[class]`` and whether the pair counts (a counted slot, a class that is no target)."""
    classes = x.shape[-1]
    rows, labels = x.reshape(-1, classes), target.reshape(-1, classes)
    slot = torch.arange(classes, device=x.device)
    end = torch.where(labels == -1, slot, classes).amin(1, keepdim=True)
    counted = slot < end  # [n, slot]: the slot holds one of the row's targets
    label = torch.where(counted, labels, 0)
    # is_target[n, k]: class k is one of row n's targets
    is_target = ((label.unsqueeze(2) == slot) & counted.unsqueeze(2)).any(1)
    picked = rows.gather(1, label)  # x[n, label of the slot]
    margin = 1 - picked.unsqueeze(2) + rows.unsqueeze(1)  # [n, slot, k]
    keep = counted.unsqueeze(2) & ~is_target.unsqueeze(1)
    return label, counted, is_target, margin, keep


@register(torch.ops.aten.multilabel_margin_loss_forward.default)
def multilabel_margin_loss_forward(x: torch.Tensor, target: torch.Tensor,
                                   reduction: int) -> Any:
    """Each row's targets are its ``target`` entries before the first ``-1``; its loss
    is the sum of ``max(0, 1 - x[j] + x[k])`` over those targets ``j`` and the non-target
    classes ``k``, over the number of classes. (torch's registered decomposition also
    counts the slots after the first ``-1``, read as class 0: wrong whenever a row
    has entries after its ``-1``.)"""
    if x.dim() not in (1, 2) or x.shape[-1] == 0:
        return NotImplemented  # kept whole: eager's own kernel
    _, _, is_target, margin, keep = _multilabel_pairs(x, target)
    per_row = torch.where(keep, margin.clamp_min(0), 0).sum((1, 2)) / x.shape[-1]
    if reduction == 1:
        loss = per_row.mean()
    elif reduction == 2:
        loss = per_row.sum()
    else:
        loss = per_row.reshape(x.shape[:-1])
    return loss, is_target.to(x.dtype).reshape(target.shape)


@register(torch.ops.aten.multilabel_margin_loss_backward.default)
def multilabel_margin_loss_backward(grad: torch.Tensor, x: torch.Tensor,
                                    target: torch.Tensor, reduction: int,
                                    is_target: torch.Tensor) -> Any:
    """The gradient of :func:`multilabel_margin_loss_forward`: each pair that counts
    with a positive margin adds ``1 / classes`` to its class ``k`` and takes it from its
    target ``j``; times the loss's gradient (over the rows for ``mean``). torch's op has
    no kernel for symbolic sizes: dynamic training through the loss compiled per size."""
    if x.dim() not in (1, 2) or x.shape[-1] == 0:
        return NotImplemented
    label, counted, _, margin, keep = _multilabel_pairs(x, target)
    active = (keep & (margin > 0)).to(x.dtype)  # [n, slot, k]
    per_class = active.sum(1)
    per_slot = torch.where(counted, active.sum(2), 0)
    rows = (per_class - torch.zeros_like(per_class).scatter_add(1, label, per_slot)) \
        / x.shape[-1]
    if reduction == 1:
        scale = grad / rows.shape[0]
    elif reduction == 2:
        scale = grad
    else:
        scale = grad.reshape(-1, 1)
    return (rows * scale).reshape(x.shape)


@register(torch.ops.aten.hardshrink_backward.default)
@register(torch.ops.aten.softshrink_backward.default)
def shrink_backward(grad: torch.Tensor, x: torch.Tensor, lambd: Any) -> Any:
    """The gradient of ``hardshrink``/``softshrink``: zero where ``-lambd <= x <=
    lambd``, ``grad`` elsewhere (NaN included). The ops have no symbolic meta kernel:
    training them with ``dynamic=True`` crashed in the backward's re-trace."""
    inside = torch.logical_and(x >= -lambd, x <= lambd)
    return torch.where(inside, torch.zeros_like(grad), grad)


# ---- _foreach_ ops: one call of the per-tensor op per list element ---------------------
# The functional ``_foreach_<op>`` ops (what the functionalizer makes of the in-place
# ``_foreach_<op>_`` ones, and ``_foreach_norm``) run the per-tensor op on each element,
# as eager's CPU kernels do; decomposed, the backend fuses the per-element ops. Every list
# argument (``Tensor[]``, ``Scalar[]``) gives its k-th element to the k-th call, the rest
# go to each call. The row maps the foreach op's arguments to the per-tensor op's.
_aten = torch.ops.aten
FOREACH_ELEMENT_OPS: dict[str, Callable[..., Any]] = {
    "_foreach_add": lambda x, other, alpha=1: _aten.add(x, other, alpha=alpha),
    "_foreach_sub": lambda x, other, alpha=1: _aten.sub(x, other, alpha=alpha),
    "_foreach_mul": _aten.mul,
    "_foreach_div": _aten.div,
    "_foreach_pow": _aten.pow,
    "_foreach_clamp_min": _aten.clamp_min,
    "_foreach_clamp_max": _aten.clamp_max,
    "_foreach_lerp": _aten.lerp,
    "_foreach_addcmul": lambda x, t1, t2, value=1: _aten.addcmul(x, t1, t2, value=value),
    "_foreach_addcdiv": lambda x, t1, t2, value=1: _aten.addcdiv(x, t1, t2, value=value),
    "_foreach_copy": lambda x, src, non_blocking=False: _aten.copy(x, src, non_blocking),
    "_foreach_zero": _aten.zero,
    "_foreach_clone": lambda x, memory_format=None: _aten.clone(
        x, memory_format=memory_format),
    "_foreach_norm": lambda x, ord=2, dtype=None: _aten.linalg_vector_norm(
        x, ord, dtype=dtype),
    **{f"_foreach_{name}": getattr(_aten, name) for name in (
        "abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp",
        "expm1", "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg",
        "reciprocal", "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan",
        "tanh", "trunc")},
}
# NOTE: addcmul/addcdiv ``.Tensor`` take one scalar per element packed in a tensor; the
# per-tensor op wants a number (a .item(), no graph holds it): they stay whole
_FOREACH_KEPT_WHOLE = frozenset({"Tensor"})
_FOREACH_KEPT_WHOLE_FOR = frozenset({"_foreach_addcmul", "_foreach_addcdiv"})


def _per_element(element_op: Callable[..., Any]) -> Callable[..., Any]:
    def decompose(*args: Any, **kwargs: Any) -> Any:
        lengths = {len(a) for a in (*args, *kwargs.values()) if isinstance(a, (list, tuple))}
        if len(lengths) != 1:
            return NotImplemented  # lists of different lengths: the op's own error
        return [element_op(*(a[k] if isinstance(a, (list, tuple)) else a for a in args),
                           **{n: v[k] if isinstance(v, (list, tuple)) else v
                              for n, v in kwargs.items()})
                for k in range(lengths.pop())]
    return decompose


for _name, _element_op in FOREACH_ELEMENT_OPS.items():
    if not hasattr(_aten, _name):
        continue  # NOTE: an op this torch build lacks (torch 2.11 has no ``_foreach_clone``)
    _packet = getattr(_aten, _name)
    for _overload in _packet.overloads():
        if "out" in _overload or (_name in _FOREACH_KEPT_WHOLE_FOR
                                  and _overload in _FOREACH_KEPT_WHOLE):
            continue
        register(getattr(_packet, _overload))(_per_element(_element_op))


def late_decompositions() -> dict[OpOverload, Callable[..., Any]]:
    """Decompositions of operators torch registers only once their namespace is loaded:
    ``prims`` ops exist after ``torch._prims`` is imported (Dynamo imports it). Looked up
    at each compile: a program recorded before they existed cannot call them."""
    found: dict[OpOverload, Callable[..., Any]] = {}
    prims = torch.ops.prims
    if hasattr(prims, "fma"):
        found[prims.fma.default] = fma
    return found
