"""Kernels (fused groups of loop nests) and the buffers they touch.

A :class:`Kernel` is one generated function. Its iteration space is the product of its
outer ``ranges`` (parallel: every point is independent) and, for a reduction kernel, its
``reduction_ranges`` (walked sequentially per outer point, or in blocks by Triton). The
body is straight-line SSA (:mod:`~ember.inductor.loop_ir.body`). Every value is either

- *outer*: it depends on the outer variables only (computed once per outer point), or
- *inner*: it depends on a reduction variable (computed once per (outer, reduction) point).

A ``Reduce`` turns an inner value into an outer one. Inner values may read outer ones,
including ``Reduce`` results: softmax is ``m = max(x)``, ``s = sum(exp(x - m))``,
``out = exp(x - m) / s`` in one kernel. :func:`reduction_phases` orders that into
sequential passes over the reduction ranges (pass 0 computes ``m``, pass 1 ``s``,
pass 2 stores ``out``), which is what a loop-based codegen emits; a codegen that holds a
whole reduction row in registers (a persistent Triton reduction) can ignore phases.

Buffers are named tensors passed to the kernel by pointer, in ``Kernel.buffers`` order.
Sizes (of ranges, buffers) are ints or sympy expressions over the graph's size symbols;
a kernel whose ranges or indexes use symbols takes them as ``int64`` scalar arguments
after the buffers, in ``Kernel.size_args`` order (sorted names).
Indexes are element offsets from the tensor's data pointer (its storage offset is
already applied), so a kernel can read any strided view of its arguments.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from ember.inductor.loop_ir.body import IndexValue, Load, Reduce, Stmt, Store, stmt_inputs
from ember.inductor.loop_ir.index import Size, Var, free_vars, size_symbols


@dataclass(frozen=True)
class Buffer:
    """A tensor a kernel reads or writes: its name (the wrapper's variable), dtype, and
    the sizes/strides of the tensor the wrapper passes (informational: the kernel indexes
    it with flat offsets)."""

    name: str
    dtype: torch.dtype
    sizes: tuple[Size, ...]
    strides: tuple[Size, ...]
    host: bool = False
    """A 0-d tensor in host memory the kernel reads but cannot address (a CPU scalar in
    a CUDA graph): passed by value, a scalar argument, in its place among the buffers."""

    @property
    def numel(self) -> Size:
        n: Size = 1
        for s in self.sizes:
            n *= s
        return n


@dataclass(frozen=True)
class MatmulTemplate:
    """Marks a kernel as a matmul template: its one ``Reduce`` (a ``sum``) is a dot
    product over the single reduction range ``r0`` of ``A[x.., m, k] * B[x.., k, n]``,
    its outer ranges are ``(batch,) m, n`` (``x0, x1(, x2)``, by position), and the
    codegen writes it as a tiled ``tl.dot`` loop with the other statements as prologue
    (those the dot's operands need) and epilogue (the rest). ``config`` names the
    codegen's tile configuration (``codegen/triton/matmul_configs.py``); ``allow_tf32``
    records the float32 precision allowed at compile time (part of the generated code,
    so a change gives another kernel)."""

    op: str
    batched: bool
    config: str
    allow_tf32: bool = False
    #: chosen by ``forced_matmul`` (tests, benchmarks): kept even when idle
    #: (``idle_templates.py``); not part of the kernel's identity
    forced: bool = field(default=False, compare=False)

    def describe(self) -> str:
        """``mm template bm64_bn64_bk32_g8_s4_w4`` (logs, schedules, kernel headers)."""
        tf32 = " tf32" if self.allow_tf32 else ""
        return f"{self.op} template {self.config}{tf32}"


@dataclass(frozen=True)
class Kernel:
    """One generated kernel: a fused group of loop nests.

    ``ranges`` are the outer (parallel) loop variables, outermost first;
    ``reduction_ranges`` the reduction variables (empty for a pointwise kernel);
    ``body`` the statements; ``buffers`` the kernel's arguments in call order.
    ``origins`` names the graph nodes fused into it (for comments and reports);
    ``template`` marks a matmul template kernel (:class:`MatmulTemplate`).
    """

    name: str
    ranges: tuple[Var, ...]
    reduction_ranges: tuple[Var, ...]
    body: tuple[Stmt, ...]
    buffers: tuple[Buffer, ...]
    origins: tuple[str, ...] = field(default=())
    template: MatmulTemplate | None = None

    @property
    def is_reduction(self) -> bool:
        return bool(self.reduction_ranges)

    @property
    def numel(self) -> Size:
        n: Size = 1
        for v in self.ranges:
            n *= v.size
        return n

    @property
    def reduction_numel(self) -> Size:
        n: Size = 1
        for v in self.reduction_ranges:
            n *= v.size
        return n

    @property
    def size_args(self) -> tuple[str, ...]:
        """The size symbols the kernel takes as ``int64`` arguments after its buffers
        (sorted names; empty for a static kernel)."""
        found: set[str] = set()
        for v in self.ranges + self.reduction_ranges:
            found |= size_symbols(v)
        for s in self.body:
            if isinstance(s, (Load, Store, IndexValue)):
                found |= size_symbols(s.index)
        return tuple(sorted(found))

    @property
    def is_symbolic(self) -> bool:
        """Whether a range of the kernel has a symbolic size."""
        return any(not isinstance(v.size, int)
                   for v in self.ranges + self.reduction_ranges)

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(f"kernel {self.name} has no buffer {name!r}")

    def loaded_buffers(self) -> list[str]:
        return _unique(s.buffer for s in self.body if isinstance(s, Load))

    def stored_buffers(self) -> list[str]:
        return _unique(s.buffer for s in self.body if isinstance(s, Store))

    def inner_values(self) -> set[str]:
        """Names of the values that depend on a reduction variable (see module doc)."""
        return self.values_depending_on({v.name for v in self.reduction_ranges})

    def values_depending_on(self, var_names: set[str]) -> set[str]:
        """Names of the values (``Reduce`` results excepted) that change with one of the
        loop variables ``var_names``."""
        found: set[str] = set()
        for s in self.body:
            if isinstance(s, (Reduce, Store)):
                continue
            index = getattr(s, "index", None)
            reads_var = index is not None and any(
                v.name in var_names for v in free_vars(index)
            )
            if reads_var or any(a in found for a in stmt_inputs(s)):
                found.add(s.name)
        return found


def _unique(names: Iterable[str]) -> list[str]:
    """``names`` without repeats, in first-seen order."""
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Phase:
    """One sequential pass over the reduction ranges: the statements to emit inside the
    loop (inner values needed this pass, including recomputed ones from earlier passes,
    its ``Reduce`` accumulations and inner stores), then the outer statements that
    become computable after it (``after``)."""

    inner: tuple[Stmt, ...]
    after: tuple[Stmt, ...]


def reduction_phases(kernel: Kernel) -> tuple[tuple[Stmt, ...], list[Phase]]:
    """Split a kernel's body into outer statements computable before any reduction loop,
    and the sequence of reduction passes (see :class:`Phase`).

    For a pointwise kernel, returns ``(body, [])``.
    """
    if not kernel.is_reduction:
        return kernel.body, []
    inner = kernel.inner_values()
    defs: dict[str, Stmt] = {s.name: s for s in kernel.body if not isinstance(s, Store)}
    # phase(v): for an inner value/stmt, the pass it is needed in; for an outer value, the
    # number of passes that must complete before it is known.
    phase: dict[str, int] = {}

    def level(s: Stmt) -> int:
        deps = [phase[a] for a in stmt_inputs(s)]
        return max(deps, default=0)

    stmt_phase: dict[int, int] = {}
    for i, s in enumerate(kernel.body):
        p = level(s)
        if isinstance(s, Reduce):
            phase[s.name] = p + 1
        elif isinstance(s, Store):
            pass
        else:
            phase[s.name] = p
        stmt_phase[i] = p
    reduction_names = {v.name for v in kernel.reduction_ranges}

    def store_is_inner(s: Store) -> bool:
        return s.value in inner or any(v.name in reduction_names for v in free_vars(s.index))

    is_inner_stmt = {
        i: (isinstance(s, Reduce) or (isinstance(s, Store) and store_is_inner(s))
            or (not isinstance(s, Store) and s.name in inner))
        for i, s in enumerate(kernel.body)
    }
    n_passes = max(
        (stmt_phase[i] + 1 for i, s in enumerate(kernel.body) if is_inner_stmt[i]
         and isinstance(s, (Reduce, Store))),
        default=0,
    )
    before = tuple(
        s for i, s in enumerate(kernel.body) if not is_inner_stmt[i] and stmt_phase[i] == 0
    )
    phases: list[Phase] = []
    for p in range(n_passes):
        roots = [
            s for i, s in enumerate(kernel.body)
            if is_inner_stmt[i] and isinstance(s, (Reduce, Store)) and stmt_phase[i] == p
        ]
        needed: set[str] = set()
        stack = [a for s in roots for a in stmt_inputs(s)]
        while stack:
            n = stack.pop()
            if n in needed or n not in inner:
                continue
            needed.add(n)
            stack.extend(stmt_inputs(defs[n]))
        body_in = tuple(
            s for s in kernel.body
            if (not isinstance(s, Store) and s.name in needed) or s in roots
        )
        after = tuple(
            s for i, s in enumerate(kernel.body)
            if not is_inner_stmt[i] and stmt_phase[i] == p + 1
        )
        phases.append(Phase(inner=body_in, after=after))
    return before, phases
