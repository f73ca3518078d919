"""Lowering pass: a matmul becomes a template loop node on backends with templates.

On a backend whose ``KernelBackend.matmul_templates`` is set (Triton), ``mm``,
``addmm``, ``bmm`` and ``baddbmm`` of float16, bfloat16 or float32 operands are offered
to the backend (``KernelBackend.matmul_template``: a heuristic, or the autotuner under
``mode="max-autotune"``). When it answers with a template, the matmul is a
:class:`~ember.inductor.buffers.MatmulBuffer` instead of an extern call: its operands'
``Lazy`` producers (a cast, a scale, a non-affine view) are inlined into its loads (the
prologue; a producer that is costly or loads more than ``PROLOGUE_MAX_BUFFERS`` buffers is
stored first), a stored operand is read through its view's strides (a transposed weight
costs nothing), ``addmm``/``baddbmm`` add ``beta * bias`` to ``alpha * acc`` in float32
before the one rounding (as cuBLAS's epilogue), and the scheduler fuses the pointwise
consumers into the same kernel (the epilogue). Otherwise the call goes on to the other
lowering passes and the extern.

Not offered (extern, as before): other dtypes, a size that is statically 0 or 1, a
``beta``/``alpha`` known only at run time, operands of another dtype than the result.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from ember.inductor.buffers import MatmulBuffer, MatmulEpilogue
from ember.inductor.codegen.backend import MatmulProblem
from ember.inductor.codegen.registry import backend_for
from ember.inductor.loop_ir import COSTLY_OPS, Compute, IndexExpr, Int, Store
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.context import ExternRequest, LoweringContext
from ember.inductor.lowering.lowered_graph import BufferInfo
from ember.inductor.lowering.matmul_extern import extern_call, lowers_alike
from ember.inductor.lowering.matmul_padding import allow_tf32, padded_width
from ember.inductor.lowering.registry import EXTERN_OPS, LOWERINGS
from ember.inductor.lowering.values import Lazy, Stored, contiguous_strides, probe
from ember.runtime.ir import Node, TensorMeta
from ember.runtime.logs import log

#: op -> (the template's op name, how many leading bias arguments, batched)
TEMPLATE_OPS = {
    "aten::mm.default": ("mm", 0, False),
    "aten::addmm.default": ("addmm", 1, False),
    "aten::bmm.default": ("bmm", 0, True),
    "aten::baddbmm.default": ("baddbmm", 1, True),
}
TEMPLATE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: an inlined operand producer loads at most this many buffers (else it is stored)
PROLOGUE_MAX_BUFFERS = 2
#: the modules whose lowering rules make element functions a template's epilogue can
#: take (pointwise ops, casts, dropout masks); a reduction consumer (softmax) cannot
EPILOGUE_RULE_MODULES = ("ember.inductor.lowering.pointwise", "ember.inductor.lowering.random")
#: the modules whose lowering rules are reductions that take in the pointwise kernel
#: they read (a norm's statistics, a sum): a matmul whose epilogue feeds one saves less
#: by fusing (``MatmulProblem.reduced``)
REDUCTION_RULE_MODULES = ("ember.inductor.lowering.reductions",)
#: how many pointwise ops deep :func:`_reduced_after_epilogue` looks past the epilogue
#: for a reduction (Llama's residual add, then ``pow``, then ``mean``)
REDUCED_SEARCH_DEPTH = 3
#: whether an ``addmm``/``baddbmm`` bias alone makes the template worth its deficit: no,
#: cuBLAS adds a 1-d bias in its own epilogue (HF GPT-2 on the H200: 5.36-5.38 ms with
#: bias-only GEMMs on cuBLAS against 5.42-5.48 as templates,
#: ``tools/gpu/ab_matmul_choice.py``, which measures both ways)
BIAS_COUNTS_AS_FUSION = False
#: ops a matmul's result may pass through on the way to a fusable consumer
VIEW_OPS = frozenset({
    "aten::view.default", "aten::_unsafe_view.default", "aten::reshape.default",
    "aten::t.default", "aten::transpose.int", "aten::permute.default",
    "aten::unsqueeze.default", "aten::squeeze.dim", "aten::alias.default",
})


def matmul_template(ctx: LoweringContext, call: ExternRequest) -> ExternRequest | Stored:
    """The template's result buffer, or ``call`` as it is (module doc)."""
    spec = TEMPLATE_OPS.get(call.node.target)
    if spec is None or not backend_for(ctx.device.type).matmul_templates:
        return call
    if call.node.name in ctx.extern_matmuls:
        log("autotune", f"matmul {call.node.name}: extern (no epilogue fused into its "
                        f"template; the graph lowered again)")
        return call
    op, n_bias, batched = spec
    meta = call.metas[0] if len(call.metas) == 1 else None
    if not isinstance(meta, TensorMeta) or meta.dtype not in TEMPLATE_DTYPES:
        return call
    dtype = meta.dtype
    if len(call.args) < n_bias + 2:
        return call
    bias = call.args[0] if n_bias else None
    a, b = call.args[n_bias:n_bias + 2]
    scalars = {"beta": 1, "alpha": 1}
    for name, value in zip(("beta", "alpha"), call.args[n_bias + 2:]):
        scalars[name] = value
    scalars.update({k: v for k, v in call.kwargs.items() if k in scalars})
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool)
               for v in scalars.values()):
        return call
    operands = [v for v in (a, b, bias) if v is not None]
    if not all(isinstance(v, (Stored, Lazy)) and v.dtype == dtype for v in operands):
        return call
    assert isinstance(a, (Stored, Lazy)) and isinstance(b, (Stored, Lazy))
    if len(a.sizes) != len(b.sizes) or len(a.sizes) != (3 if batched else 2):
        return call
    *lead, m, k = a.sizes
    n = b.sizes[-1]
    if any(isinstance(s, int) and s in (0, 1) for s in (m, n, k)):
        return call
    if batched and isinstance(lead[0], int) and lead[0] == 0:
        return call
    # NOTE: a producer the template would store first (a layer norm's output) is no
    # fusion: the extern reads the same stored buffer. An unaligned result the extern
    # would pad is (GPT-2's LM head, 50257 columns: padded, cuBLAS's result was copied
    # out of the padded one, +0.6 ms and +785 MiB on the H200 against the template)
    inlined = [isinstance(v, Lazy) and _inlinable(v) for v in (a, b)]
    padded = padded_width(ctx, call) is not None
    certain = (bias is not None and BIAS_COUNTS_AS_FUSION) or any(inlined) or padded
    consumer = not certain and _has_fusable_consumer(ctx, call.node)
    reduced = consumer and _reduced_after_epilogue(ctx, call.node)
    problem = MatmulProblem(
        op, lead[0] if batched else None, m, n, k, dtype,
        a.strides if isinstance(a, Stored) else None,
        b.strides if isinstance(b, Stored) else None,
        fuses=certain or consumer, allow_tf32=allow_tf32(),
        epilogue_only=not (any(inlined) or padded), reduced=reduced)
    template = backend_for(ctx.device.type).matmul_template(problem)
    if template is None:
        return call
    sizes = (*lead, m, n)
    needs_epilogue = consumer and not template.forced
    # NOTE: asked before the operands are stored: whether the extern would store them alike
    alike = needs_epilogue and lowers_alike(ctx, call, bias, sizes)
    a, b = (_prologue(ctx, v) for v in (a, b))
    epilogue: MatmulEpilogue | None = None if bias is None else _bias_epilogue(
        bias, sizes, float(scalars["beta"]), float(scalars["alpha"]))
    if bias is None and scalars["alpha"] != 1:
        epilogue = _bias_epilogue(None, sizes, 0.0, float(scalars["alpha"]))
    name = ctx.fresh()
    extern = None
    if alike:
        assert isinstance(a, Stored) and isinstance(b, Stored)  # as _prologue left them
        extern = extern_call(ctx, call, {n_bias: a, n_bias + 1: b}, name)
    node = MatmulBuffer(name, dtype, tuple(sizes), k, a.element, b.element, template,
                        epilogue, (call.node.name,), needs_epilogue=needs_epilogue,
                        extern=extern)
    strides = contiguous_strides(sizes)
    ctx.nodes.append(node)
    ctx.buffers[name] = BufferInfo(name, dtype, tuple(sizes), strides, "computed")
    return Stored(name, dtype, tuple(sizes), strides)


def _prologue(ctx: LoweringContext, value: Stored | Lazy) -> Stored | Lazy:
    """``value`` as the template reads it: a Lazy producer inlined when it is cheap
    (no costly op, no run-time check, at most ``PROLOGUE_MAX_BUFFERS`` buffers), else
    stored first."""
    if isinstance(value, Stored) or _inlinable(value):
        return value
    return ctx.realize(value)


def _inlinable(value: Lazy) -> bool:
    """Whether the template may compute ``value`` in its loads: no costly op, no
    run-time check, at most ``PROLOGUE_MAX_BUFFERS`` buffers."""
    b = probe(value)
    costly = any(isinstance(s, Compute) and s.op in COSTLY_OPS for s in b.stmts)
    # NOTE: a run-time check's store (a gather's bounds) cannot run per K step
    checked = any(isinstance(s, Store) for s in b.stmts)
    return not (costly or checked
                or len({buf for buf, _ in b.external_loads}) > PROLOGUE_MAX_BUFFERS)


def _bias_epilogue(bias: Stored | Lazy | None, sizes: Sequence[object], beta: float,
                   alpha: float) -> MatmulEpilogue:
    """``alpha * acc + beta * bias`` in float32 (bias broadcast to ``sizes`` from the
    right; ``beta == 0`` ignores it, NaNs included, as ATen)."""
    def epilogue(b: BodyBuilder, acc: str, index: tuple[IndexExpr, ...]) -> str:
        value = acc
        if alpha != 1:
            value = b.compute("mul", value, b.literal(alpha, torch.float32))
        if bias is None or beta == 0:
            return value
        lead = len(index) - len(bias.sizes)
        bias_index = tuple(Int(0) if s == 1 else index[lead + d]
                           for d, s in enumerate(bias.sizes))
        term = b.cast(bias.element(b, bias_index), torch.float32)
        if beta != 1:
            term = b.compute("mul", term, b.literal(beta, torch.float32))
        return b.compute("add", value, term)
    return epilogue


def _has_fusable_consumer(ctx: LoweringContext, node: Node) -> bool:
    """Whether a consumer of ``node``'s result (through views) is a pointwise op (its
    rule in :data:`EPILOGUE_RULE_MODULES`) the scheduler may fuse as the template's
    epilogue."""
    return bool(_epilogue_consumers(ctx, node.name))


def _reduced_after_epilogue(ctx: LoweringContext, node: Node) -> bool:
    """Whether a reduction (its rule in :data:`REDUCTION_RULE_MODULES`) reads a value of
    ``node``'s pointwise consumers, through views and at most
    ``REDUCED_SEARCH_DEPTH`` pointwise ops: a residual add before a norm's mean, the
    summed input gradients before a norm's backward sums."""
    frontier = _epilogue_consumers(ctx, node.name)
    seen = set(frontier)
    for _ in range(REDUCED_SEARCH_DEPTH):
        following: list[str] = []
        for name in frontier:
            for user in _call_users(ctx, name):
                if _rule_module(user.target) in REDUCTION_RULE_MODULES:
                    return True
            following += [c for c in _epilogue_consumers(ctx, name) if c not in seen]
        seen.update(following)
        frontier = following
    return False


def _epilogue_consumers(ctx: LoweringContext, name: str) -> list[str]:
    """The pointwise ops (rules in :data:`EPILOGUE_RULE_MODULES`) that read ``name``'s
    value, through views."""
    return [user.name for user in _call_users(ctx, name)
            if user.target not in EXTERN_OPS
            and _rule_module(user.target) in EPILOGUE_RULE_MODULES]


def _call_users(ctx: LoweringContext, name: str) -> list[Node]:
    """The call nodes reading ``name``'s value, the users of its views in their place."""
    return [user for user in ctx.uses.consumers(name, VIEW_OPS) if user.op == "call"]


def _rule_module(target: object) -> str | None:
    rule = LOWERINGS.get(target) if isinstance(target, str) else None
    return None if rule is None else rule.__module__


__all__ = ["EPILOGUE_RULE_MODULES", "PROLOGUE_MAX_BUFFERS", "TEMPLATE_OPS", "allow_tf32", "matmul_template"]
