"""What the lowering hands to the scheduler: buffers to compute and extern calls.

A lowered graph is a list, in dependency order, of

- :class:`PointwiseBuffer` — a buffer whose every element is ``fn(index)``;
- :class:`ReductionBuffer` — a buffer reducing ``fn(full_index)`` over some dims;
- :class:`MatmulBuffer` — a matrix product (``mm``/``addmm``/``bmm``/``baddbmm`` on a
  backend with matmul templates): a reduction over ``k`` of ``A[.., m, k] * B[.., k, n]``
  that the codegen writes as a tiled ``tl.dot`` template, its operands' producers
  inlined into its loads (prologue) and its consumers fused into its store (epilogue);
- :class:`ScatterBuffer` — writes (or adds) values into computed positions of a buffer
  an earlier node initialized (index_put, scatter, index_add);
- :class:`ExternCall` — an eager ATen op the wrapper calls (matmul, convolution,
  attention, and every op without a loop lowering).

The first three are *loop nodes*: the scheduler places them in kernels (fused groups) by
calling :meth:`emit` with the group's loop variables. Each computes, once when it is
made, the buffers it ``reads`` (emitted over its own loop variables, :func:`loop_vars`)
and ``writes``; the scheduler orders and prunes nodes by these fields.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from ember.inductor.loop_ir import Compute, IndexExpr, Int, MatmulTemplate, Var, add, mul
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.extern_args import ExternArg
from ember.inductor.lowering.values import ElementFn, contiguous_strides


def loop_vars(sizes: Sequence[int], prefix: str) -> list[IndexExpr]:
    """One loop variable per dim (``x0``, ``x1``, ...); size-1 dims get the constant 0."""
    return [Var(f"{prefix}{i}", s) if s != 1 else Int(0) for i, s in enumerate(sizes)]


def _external_reads(b: BodyBuilder) -> tuple[str, ...]:
    """The buffers ``b``'s body loaded, in first-load order."""
    return tuple(dict.fromkeys(buf for buf, _ in b.external_loads))


def _reads_and_writes(node: PointwiseBuffer | ScatterBuffer) -> tuple[tuple[str, ...],
                                                                      tuple[str, ...], int]:
    """What a node that stores only its own buffer reads (its body emitted once over
    its sizes) and writes, and how many computations (casts included) an element takes."""
    b = BodyBuilder()
    node.emit(b, loop_vars(node.sizes, "x"))
    work = sum(isinstance(s, Compute) for s in b.stmts)
    return _external_reads(b), (node.name,), work


@dataclass(eq=False)
class PointwiseBuffer:
    """``name[i] = fn(i)`` for ``i`` over ``sizes``; stored contiguously."""

    name: str
    dtype: torch.dtype
    sizes: tuple[int, ...]
    fn: ElementFn
    origins: tuple[str, ...] = ()
    layout: tuple[int, ...] | None = None  # strides; None = contiguous
    reads: tuple[str, ...] = field(init=False, default=())
    writes: tuple[str, ...] = field(init=False, default=())
    #: computations (arithmetic, casts, math functions) per element
    work: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.reads, self.writes, self.work = _reads_and_writes(self)

    @property
    def strides(self) -> tuple[int, ...]:
        return self.layout if self.layout is not None else contiguous_strides(self.sizes)

    def store_index(self, index: Sequence[IndexExpr]) -> IndexExpr:
        return add(*(mul(i, s) for i, s in zip(index, self.strides) if self.sizes))

    def emit(self, b: BodyBuilder, index: Sequence[IndexExpr]) -> None:
        value = b.cast(self.fn(b, tuple(index)), self.dtype)
        b.store(self.name, self.store_index(index), value)


@dataclass(eq=False)
class ReductionBuffer:
    """``name[o] = op over dims of fn(full index)``.

    ``full_sizes`` is the iteration space of ``fn``; ``dims`` the reduced dims (sorted);
    the result has ``full_sizes`` with ``dims`` set to 1 (``keepdim``) or removed.
    The loop structure is outer = the other dims in order, reduction = ``dims`` in order.
    """

    name: str
    dtype: torch.dtype
    op: str
    full_sizes: tuple[int, ...]
    dims: tuple[int, ...]
    keepdim: bool
    fn: ElementFn
    origins: tuple[str, ...] = ()
    reads: tuple[str, ...] = field(init=False, default=())
    writes: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        b = BodyBuilder()
        self.emit(b, loop_vars(self.outer_sizes, "x"), loop_vars(self.reduction_sizes, "r"))
        self.reads = _external_reads(b)
        self.writes = (self.name,)

    @property
    def sizes(self) -> tuple[int, ...]:
        if self.keepdim:
            return tuple(1 if d in self.dims else s for d, s in enumerate(self.full_sizes))
        return tuple(s for d, s in enumerate(self.full_sizes) if d not in self.dims)

    @property
    def strides(self) -> tuple[int, ...]:
        return contiguous_strides(self.sizes)

    @property
    def outer_sizes(self) -> tuple[int, ...]:
        return tuple(s for d, s in enumerate(self.full_sizes) if d not in self.dims)

    @property
    def reduction_sizes(self) -> tuple[int, ...]:
        return tuple(self.full_sizes[d] for d in self.dims)

    def full_index(self, outer: Sequence[IndexExpr], red: Sequence[IndexExpr]) -> list[IndexExpr]:
        o, r = iter(outer), iter(red)
        return [next(r) if d in self.dims else next(o) for d in range(len(self.full_sizes))]

    def store_index(self, outer: Sequence[IndexExpr]) -> IndexExpr:
        if self.keepdim:
            o = iter(outer)
            index: list[IndexExpr] = [
                Int(0) if d in self.dims else next(o) for d in range(len(self.full_sizes))]
        else:
            index = list(outer)
        return add(*(mul(i, s) for i, s in zip(index, self.strides)))

    def emit(self, b: BodyBuilder, outer: Sequence[IndexExpr], red: Sequence[IndexExpr]
             ) -> None:
        value = self.fn(b, tuple(self.full_index(outer, red)))
        acc = _accumulator_dtype(self.op, b.dtype(value), self.dtype)
        # NOTE: an argmax/argmin compares values of ``acc`` but its result is an index
        # (int64): typed as the values, a bool index read 2 as 1 (max.dim of a mask) and
        # a float one lost integers past 2**24.
        result_dtype = torch.int64 if self.op in ("argmax", "argmin") else acc
        result = b.reduce(self.op, b.cast(value, acc), result_dtype)
        b.store(self.name, self.store_index(outer), b.cast(result, self.dtype))


def _accumulator_dtype(op: str, value: torch.dtype, result: torch.dtype) -> torch.dtype:
    if op in ("argmax", "argmin", "max", "min"):
        return value
    if op in ("any", "all"):
        return torch.bool
    return result


#: ``epilogue(builder, accumulator, outer index) -> value``: what a matmul stores, from
#: its float32 accumulator (addmm's ``beta * bias + alpha * acc``)
MatmulEpilogue = Callable[[BodyBuilder, str, tuple[IndexExpr, ...]], str]


@dataclass(eq=False)
class MatmulBuffer:
    """``name[.., m, n] = epilogue(sum over k of A(.., m, k) * B(.., k, n))``, accumulated
    in float32 and stored row-major as ``dtype``.

    ``outer_sizes`` is ``(batch,) M, N`` and ``k`` the reduction size; ``a`` and ``b``
    compute one operand element each (a ``Stored`` view's load, or a ``Lazy`` producer
    inlined as the template's prologue); ``template`` is what the codegen writes (see
    :class:`~ember.inductor.loop_ir.MatmulTemplate`). The scheduler places it like a
    reduction of its own (nothing else reduces in its kernel) whose pointwise consumers
    over ``outer_sizes`` fuse as outer work (the epilogue).
    """

    name: str
    dtype: torch.dtype
    outer_sizes: tuple[int, ...]
    k: int
    a: ElementFn
    b: ElementFn
    template: MatmulTemplate
    epilogue: MatmulEpilogue | None = None
    origins: tuple[str, ...] = ()
    #: the template was chosen for the pointwise consumers expected to fuse into it
    #: alone: when none does, it runs as the extern call (``idle_templates.py``)
    needs_epilogue: bool = False
    #: that extern call, as the lowering would have emitted it (the result in this
    #: buffer); None when the extern's lowering would differ in more than this node
    #: (``lowering/matmul_extern.py``): then the graph is lowered again
    extern: ExternCall | None = None
    reads: tuple[str, ...] = field(init=False, default=())
    writes: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        b = BodyBuilder()
        self.emit(b, loop_vars(self.outer_sizes, "x"), loop_vars((self.k,), "r"))
        self.reads = _external_reads(b)
        self.writes = (self.name,)

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.outer_sizes

    @property
    def strides(self) -> tuple[int, ...]:
        return contiguous_strides(self.sizes)

    @property
    def reduction_sizes(self) -> tuple[int, ...]:
        return (self.k,)

    def store_index(self, outer: Sequence[IndexExpr]) -> IndexExpr:
        return add(*(mul(i, s) for i, s in zip(outer, self.strides)))

    def emit(self, b: BodyBuilder, outer: Sequence[IndexExpr], red: Sequence[IndexExpr]
             ) -> None:
        *batch, m, n = outer
        k = red[0]
        a = b.cast(self.a(b, (*batch, m, k)), torch.float32, as_stored=True)
        w = b.cast(self.b(b, (*batch, k, n)), torch.float32, as_stored=True)
        acc = b.reduce("sum", b.compute("mul", a, w), torch.float32)
        value = acc if self.epilogue is None else self.epilogue(b, acc, tuple(outer))
        b.store(self.name, self.store_index(outer), b.cast(value, self.dtype))


ScatterFn = Callable[[BodyBuilder, tuple[IndexExpr, ...]],
                     tuple[IndexExpr, str, "str | None"]]


@dataclass(eq=False)
class ScatterBuffer:
    """For every ``i`` over ``sizes`` (the updates' iteration space), with
    ``(target, value, mask) = fn(i)``: ``name[target] = value`` where ``mask`` holds
    (``+=`` when ``accumulate``). ``target`` is a flat element offset into ``name``, in
    general through an :class:`~ember.inductor.loop_ir.Indirect` index.

    ``name`` is the buffer of an earlier :class:`PointwiseBuffer` (its initial contents);
    after this node, readers of ``name`` see the scattered values. The scheduler runs it
    as a kernel of its own, after the initializing kernel and before every reader, and
    never forwards its stores (positions repeat and are known only at run time).
    """

    name: str
    dtype: torch.dtype
    sizes: tuple[int, ...]
    fn: ScatterFn
    accumulate: bool = False
    origins: tuple[str, ...] = ()
    reads: tuple[str, ...] = field(init=False, default=())
    writes: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        self.reads, self.writes, _ = _reads_and_writes(self)

    def emit(self, b: BodyBuilder, index: Sequence[IndexExpr]) -> None:
        target, value, mask = self.fn(b, tuple(index))
        b.scatter(self.name, target, b.cast(value, self.dtype), mask, self.accumulate)


@dataclass(eq=False)
class ExternCall:
    """``outputs = target(*args, **kwargs)`` run by the wrapper on real tensors.

    ``args``/``kwargs`` are :mod:`~ember.inductor.lowering.extern_args` values (buffers,
    views of them, run-time variables, lists, constants; the wrapper renders them) and
    ``reads`` the wrapper variables they read. ``outputs`` names the wrapper
    variables of the results (one per result; None for a result nobody reads);
    ``result_meta`` gives their expected dtype/sizes/strides (None: not a tensor);
    ``binds`` the unbacked symbols int results are (result index, symbol: ``.item()``).
    ``mutates``: the buffers the call writes in place (a custom operator declared with
    ``mutates_args``, given buffers only it holds: ``lowering/custom_ops.py``); every
    later reader of them runs after it.
    """

    target: str
    args: list[ExternArg]
    kwargs: dict[str, ExternArg]
    outputs: list[str | None]
    result_meta: list[tuple[torch.dtype, tuple[int, ...], tuple[int, ...]] | None]
    reads: list[str] = field(default_factory=list)
    is_fallback: bool = False
    multi: bool = False
    origins: tuple[str, ...] = ()
    note: str = ""
    binds: tuple[tuple[int, str], ...] = ()
    mutates: tuple[str, ...] = ()


LoopNode = PointwiseBuffer | ReductionBuffer | ScatterBuffer | MatmulBuffer
ScheduledNode = PointwiseBuffer | ReductionBuffer | ScatterBuffer | MatmulBuffer | ExternCall
ElementFnT = Callable[[BodyBuilder, tuple[IndexExpr, ...]], str]
