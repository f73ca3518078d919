"""Lowering pass: matmuls with unaligned dims run on zero-padded operands.

cuBLAS loads 16 bytes at a time only when each operand's contiguous extent and leading
dimension are multiples of 16 bytes; otherwise it falls back to unaligned kernels, 5-7x
slower on the H200. Three dims of a matmul ``[M, K] @ [K, N]`` can be unaligned:

===  =======================================  ============================================
dim  unaligned where                          padded
===  =======================================  ============================================
N    always (the result's rows)               the right operand's columns (and the bias);
                                              the result is a view of the first N columns
K    the left operand is row-major or the     both operands along K (zeros add nothing)
     right one column-major
M    the left operand is column-major         the left operand's rows; the result is a
                                              view of the first M rows
===  =======================================  ============================================

GPT-2's LM head (50257 columns) has all three: its forward (N), and its backward's input
gradient (``dlogits @ W``: K) and weight gradient (``dlogitsᵀ @ h``: M). The backward's
two pads of ``dlogits`` are one buffer: a column-major operand is padded in its
transposed (row-major) form, and pads of the same stored view are made once per graph.
N is padded when the result has :data:`PAD_MATMUL_MIN_NUMEL` elements; M and K when the
left operand has that many and the matmul is compute-bound (:data:`PAD_MIN_INTENSITY`),
where the unaligned kernel is slow and the pad's copy is cheap beside the matmul.

Only matmuls that run on tensor cores are padded: 16-bit ones, and float32 ones where
torch allows TF32 (:func:`allow_tf32`). A float32 matmul without TF32 runs on cuBLAS's
CUDA-core (FFMA) kernels, which run as fast on unaligned operands: in hf_llama's float32
training step on an H100 (intermediate width 2730), the padded and the unpadded GEMMs
took the same time (61.2 against 60.7 ms a step) while the pads and the compact copies
of the padded results cost 2.8 ms a step.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Literal

import torch

from ember.inductor.codegen.registry import backend_for
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.context import ExternRequest, LoweringContext
from ember.inductor.lowering.extern_args import ExternArg
from ember.inductor.lowering.layout import column_major_strides
from ember.inductor.lowering.layout_passes import matmul_operand, unit_stride_dim
from ember.inductor.lowering.saved_padding import padded_input
from ember.inductor.lowering.values import Lazy, Stored, contiguous_strides, numel
from ember.inductor.loop_ir import IndexExpr
from ember.runtime.ir import TensorMeta

#: the least number of result elements worth padding a matmul, the least flops per byte
#: (``2*M*N*K`` over the operands' and result's bytes) worth padding M or K, and the ops
#: padded (which devices pad: their backend's ``pads_unaligned_matmuls``)
PAD_MATMUL_MIN_NUMEL = 1 << 20
PAD_MIN_INTENSITY = 64.0
PADDABLE_MATMULS = ("aten::mm.default", "aten::addmm.default", "aten::bmm.default")

Orientation = Literal["row", "col"]


@dataclass(frozen=True)
class MatmulPadding:
    """The padded sizes of a matmul's dims (None: the dim runs as it is)."""

    m: int | None
    n: int | None
    k: int | None

    def describe(self, m: int, n: int, k: int) -> str:
        return ", ".join(f"{name} {size} -> {padded}" for name, size, padded in
                         (("M", m, self.m), ("N", n, self.n), ("K", k, self.k))
                         if padded is not None)


def allow_tf32() -> bool:
    """Whether float32 matmuls may use TF32, as torch says at compile time (the program
    cache's key holds both settings)."""
    return bool(torch.backends.cuda.matmul.allow_tf32
                or torch.get_float32_matmul_precision() != "highest")


def _on_tensor_cores(dtype: torch.dtype) -> bool:
    """Whether cuBLAS runs a matmul of ``dtype`` on tensor cores (module doc): float32
    only with TF32 allowed."""
    return dtype != torch.float32 or allow_tf32()


def _aligned(size: int, align: int) -> int:
    return -(-size // align) * align


def _static_meta(ctx: LoweringContext, call: ExternRequest) -> TensorMeta | None:
    """The result meta of a matmul this device pads, or None."""
    meta = call.metas[0] if len(call.metas) == 1 else None
    if (call.node.target not in PADDABLE_MATMULS
            or not backend_for(ctx.device.type).pads_unaligned_matmuls
            or not isinstance(meta, TensorMeta)
            or not all(isinstance(s, int) for s in meta.sizes)
            or not meta.dtype.is_floating_point
            or not _on_tensor_cores(meta.dtype)):
        return None
    return meta


def padded_width(ctx: LoweringContext, call: ExternRequest) -> int | None:
    """The aligned width (N) the extern ``call`` would run on, or None when its result
    rows are aligned, it is small, or its device's backend does not pad
    (``KernelBackend.pads_unaligned_matmuls``). A matmul template needs no padding: the
    pad's copies and the strided result are work the template saves."""
    meta = _static_meta(ctx, call)
    if meta is None:
        return None
    sizes = tuple(int(s) for s in meta.sizes)
    align = max(1, 16 // meta.dtype.itemsize)
    if sizes[-1] % align == 0 or numel(sizes) < PAD_MATMUL_MIN_NUMEL:
        return None
    return _aligned(sizes[-1], align)


def orientation(ctx: LoweringContext, v: Stored | Lazy) -> Orientation:
    """How an operand reaches the matmul: row-major (its last dim contiguous) or
    column-major (its second-to-last). A stored operand in neither layout is copied
    row-major by ATen; a computed one is stored as :func:`matmul_operand` decides."""
    if isinstance(v, Stored):
        if v.strides[-1] != 1 and v.strides[-2] == 1:
            return "col"
        return "row"
    if not ctx.is_realized(v) and unit_stride_dim(ctx, v) == len(v.sizes) - 2:
        return "col"
    return "row"


def plan_padding(ctx: LoweringContext, call: ExternRequest) -> MatmulPadding | None:
    """Which dims of ``call`` run padded (module doc), or None for none."""
    meta = _static_meta(ctx, call)
    if meta is None:
        return None
    count = 3 if call.node.target == "aten::addmm.default" else 2
    *bias, a, b = call.args[:count]
    if not all(isinstance(v, (Stored, Lazy)) and all(isinstance(s, int) for s in v.sizes)
               for v in (a, b, *bias)):
        return None
    assert isinstance(a, (Stored, Lazy)) and isinstance(b, (Stored, Lazy))
    m, k = (int(s) for s in a.sizes[-2:])
    n = int(b.sizes[-1])
    if min(m, n, k) <= 1:
        return None
    align = max(1, 16 // meta.dtype.itemsize)
    big_result = numel(tuple(int(s) for s in meta.sizes)) >= PAD_MATMUL_MIN_NUMEL
    flops = 2.0 * m * n * k
    moved = (m * k + k * n + m * n) * meta.dtype.itemsize
    # M and K: a big left operand (the one padded) in a compute-bound matmul
    pad_worth = m * k >= PAD_MATMUL_MIN_NUMEL and flops / moved >= PAD_MIN_INTENSITY
    a_way, b_way = orientation(ctx, a), orientation(ctx, b)
    pad_n = big_result and n % align != 0
    pad_k = pad_worth and k % align != 0 and (a_way == "row" or b_way == "col")
    bias_rows = any(len(x.sizes) >= 2 and x.sizes[-2] == m for x in bias
                    if isinstance(x, (Stored, Lazy)))
    pad_m = pad_worth and m % align != 0 and a_way == "col" and not bias_rows
    if not (pad_n or pad_k or pad_m):
        return None
    return MatmulPadding(_aligned(m, align) if pad_m else None,
                         _aligned(n, align) if pad_n else None,
                         _aligned(k, align) if pad_k else None)


def _zero_padded(v: Stored | Lazy, sizes: tuple[int, ...]) -> Lazy:
    """``v`` grown to ``sizes`` with zeros after its last element in each dim."""
    grown = [d for d, (have, want) in enumerate(zip(v.sizes, sizes)) if have != want]

    def fn(b: BodyBuilder, index: tuple[IndexExpr, ...]) -> str:
        inside = b.all_of(*(b.compute("lt", b.index_value(index[d]),
                                      b.literal(v.sizes[d], torch.int64))
                            for d in grown))
        with b.masked(inside):
            value = v.element(b, index)
        return b.compute("where", inside, value, b.literal(0, v.dtype))

    return Lazy(fn, v.dtype, sizes)


def _strides(sizes: tuple[int, ...], way: Orientation) -> tuple[int, ...]:
    return contiguous_strides(sizes) if way == "row" else column_major_strides(sizes)


def _transposed(v: Stored) -> Stored:
    return Stored(v.buffer, v.dtype, (*v.sizes[:-2], v.sizes[-1], v.sizes[-2]),
                  (*v.strides[:-2], v.strides[-1], v.strides[-2]), v.offset)


# the pads made by one lowering (one per stored view, size and layout): GPT-2's
# backward pads its logits' gradient for two matmuls, once row- and once column-major
_PADS: weakref.WeakKeyDictionary[LoweringContext, dict[object, Stored]] = (
    weakref.WeakKeyDictionary())


def padded_operand(ctx: LoweringContext, v: Stored | Lazy, sizes: tuple[int, ...],
                   way: Orientation, origin: str) -> Stored:
    """``v`` zero-padded to ``sizes`` in a buffer laid out ``way`` (the kernel reads
    ``v`` once; a stored view padded before in this graph is not padded again)."""
    if tuple(v.sizes) == sizes and isinstance(v, Stored):
        return v
    if isinstance(v, Stored) and way == "row" and (
            whole := padded_input(ctx, v, sizes)) is not None:
        return whole  # a saved value the forward stored padded (saved_padding.py)
    pads = _PADS.setdefault(ctx, {})
    key: object = None
    if isinstance(v, Stored):
        # NOTE: keyed by the row-major form: a column-major pad is the same buffer as
        # the row-major pad of the transposed view
        row = v if way == "row" else _transposed(v)
        row_sizes = sizes if way == "row" else (*sizes[:-2], sizes[-1], sizes[-2])
        key = (row.buffer, row.offset, row.sizes, row.strides, row_sizes)
        cached = pads.get(key)
        if cached is not None:
            return cached if way == "row" else _transposed(cached)
    stored = ctx.realize(_zero_padded(v, sizes), strides=_strides(sizes, way),
                         origin=origin, reuse=False)
    if key is not None:
        pads[key] = stored if way == "row" else _transposed(stored)
    elif way == "row" and isinstance(v, Lazy):
        ctx.row_pads.append((v, stored))  # the forward may save v as this buffer
    return stored


def pad_unaligned_matmul(ctx: LoweringContext, call: ExternRequest) -> ExternRequest | Stored:
    """The padded matmul's result (a view of the padded one when M or N grew), or
    ``call`` as it is when :func:`plan_padding` says it runs unpadded."""
    plan = plan_padding(ctx, call)
    if plan is None:
        return call
    node = call.node
    meta = call.metas[0]
    assert isinstance(meta, TensorMeta)
    sizes = tuple(int(s) for s in meta.sizes)
    count = 3 if node.target == "aten::addmm.default" else 2
    *bias, a, b = call.args[:count]
    assert isinstance(a, (Stored, Lazy)) and isinstance(b, (Stored, Lazy))
    *lead, m, k = (int(s) for s in a.sizes)
    n = int(b.sizes[-1])
    mp, np_, kp = plan.m or m, plan.n or n, plan.k or k

    def operand(v: Stored | Lazy, want: tuple[int, ...], way: Orientation) -> ExternArg:
        if tuple(v.sizes) == want:
            return ctx.extern_arg(matmul_operand(ctx, v))
        return ctx.extern_arg(padded_operand(ctx, v, want, way, node.name))

    # NOTE: a padded copy keeps its operand's orientation where the padded extents allow
    # (a weight's transpose is read contiguously); a row-major result needs N padded
    # in a row-major right operand, and a padded M is a column-major left operand's
    a_way: Orientation = "col" if plan.m is not None or orientation(ctx, a) == "col" else "row"
    b_way: Orientation = "col" if plan.n is None and orientation(ctx, b) == "col" else "row"
    args = [operand(a, (*lead, mp, kp), a_way), operand(b, (*lead, kp, np_), b_way)]
    padded_sizes = (*sizes[:-2], mp, np_)
    for x in bias:
        assert isinstance(x, (Stored, Lazy))
        want = tuple(p if s == full and s > 1 else s
                     for s, full, p in zip(x.sizes, sizes[-len(x.sizes):],
                                           padded_sizes[-len(x.sizes):]))
        args.insert(0, operand(x, want, "row"))
    rest = [ctx.extern_arg(x) for x in call.args[count:]]
    kwargs = {name: ctx.extern_arg(v) for name, v in call.kwargs.items()}
    note = f"padded for aligned loads: {plan.describe(m, n, k)}"
    if padded_sizes != sizes:
        note += f"; the result is a view of the first {m} x {n}"
    out = ctx.extern_step(node.target, args + rest, kwargs, meta.dtype, padded_sizes,
                          node.name, note)
    return Stored(out, meta.dtype, sizes, contiguous_strides(padded_sizes))


__all__ = ["PADDABLE_MATMULS", "PAD_MATMUL_MIN_NUMEL", "PAD_MIN_INTENSITY", "MatmulPadding",
           "orientation", "pad_unaligned_matmul", "padded_operand", "padded_width",
           "plan_padding"]
