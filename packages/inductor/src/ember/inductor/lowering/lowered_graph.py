"""LoweredGraph: what the lowering hands to the scheduler and the wrapper, as plain data.

A frozen record of one lowered graph: its inputs and constants (wrapper variables), the
buffers (each one's layout and kind), the nodes in dependency order — loop nodes
(:class:`~ember.inductor.buffers.PointwiseBuffer`, ``ReductionBuffer``, ``ScatterBuffer``)
and extern calls (:class:`~ember.inductor.buffers.ExternCall`, arguments as
:mod:`.extern_args` values) — and the outputs. ``str(lowered)`` prints it, loop nodes with
their loop-IR bodies, for logs and golden tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

import torch
from ember.inductor.buffers import (
    ExternCall,
    LoopNode,
    MatmulBuffer,
    ReductionBuffer,
    ScatterBuffer,
    ScheduledNode,
)
from ember.inductor.loop_ir import IndexExpr, Int, Size, Var, render_size
from ember.inductor.loop_ir.printer import dtype_name, format_stmt
from ember.inductor.lowering.builder import BodyBuilder
from ember.inductor.lowering.extern_args import ExternArg
from ember.runtime.ir import ShapeGuard, SymbolRange

if TYPE_CHECKING:
    from ember.inductor.lowering.checks import RuntimeCheck

#: what a buffer holds: a graph input, a constant, a kernel's result, an extern call's
#: result, or the run-time checks' error flags (``lowering/checks.py``)
BUFFER_KINDS = ("input", "constant", "computed", "extern", "errors")


@dataclass(frozen=True)
class BufferInfo:
    """A wrapper variable holding a tensor: its layout and where it comes from (``kind``,
    one of :data:`BUFFER_KINDS`)."""

    name: str
    dtype: torch.dtype
    sizes: tuple[Size, ...]
    strides: tuple[Size, ...]
    kind: str
    storage_offset: Size = 0
    host: bool = False
    """A CPU 0-d tensor of a graph on another device (a CPU ``state['step']`` read by
    CUDA ops): kernels take its value as a scalar argument, read on the host at the
    launch (``lowering/host_scalars.py``); it is never a kernel's result."""


@dataclass(frozen=True)
class GraphInput:
    """Graph input ``name`` (``arg0``, ...) and the graph's meta for it (a
    :class:`~ember.runtime.ir.TensorMeta` for a tensor, else whatever the graph holds)."""

    name: str
    meta: object


@dataclass(frozen=True)
class MutatedInput:
    """Graph output ``output`` is the new value of graph input ``input`` (``argN``, the
    placeholder ``placeholder``: its ``MUTATED_INPUT`` output, copied back by the runtime
    unless the wrapper returns the input itself). ``kept``: why no kernel may write the
    input in place whatever the schedule (another input aliases it, it requires grad in
    a program with a backward graph), or None (``codegen/input_writes.py`` decides)."""

    output: int
    input: str
    placeholder: str
    kept: str | None = None


@dataclass(frozen=True)
class LoweredGraph:
    """One lowered graph (see the module doc).

    ``output_buffers`` are the wrapper variables the outputs return (never freed);
    ``fallbacks`` counts the ops that run eagerly for want of a lowering; ``checks`` are the
    run-time checks the kernels record into the error buffer.
    """

    graph_name: str
    device: torch.device
    inputs: tuple[GraphInput, ...]
    constants: Mapping[str, str]  # wrapper variable -> Program.tensors key
    buffers: Mapping[str, BufferInfo]
    nodes: tuple[ScheduledNode, ...]
    outputs: tuple[ExternArg, ...]
    output_buffers: frozenset[str]
    fallbacks: Mapping[str, int]
    checks: tuple[RuntimeCheck, ...]
    #: the graph's size symbols (range and hint) and shape guards: the wrapper binds the
    #: symbols from the inputs and checks both (empty for a static graph)
    symbols: Mapping[str, SymbolRange] = field(default_factory=dict)
    guards: tuple[ShapeGuard, ...] = ()
    #: the graph's mutated inputs that have a buffer (``lowering/written_args.py``)
    mutated_inputs: tuple[MutatedInput, ...] = ()
    #: outputs returned as their zero-padded buffer: index -> padded last size
    #: (``lowering/saved_padding.py``)
    padded_outputs: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("constants", "buffers", "fallbacks", "symbols", "padded_outputs"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @property
    def loop_nodes(self) -> tuple[LoopNode, ...]:
        """The nodes the scheduler places in kernels."""
        return tuple(n for n in self.nodes if not isinstance(n, ExternCall))

    @property
    def extern_nodes(self) -> tuple[ExternCall, ...]:
        """The nodes the wrapper runs as calls to eager ops."""
        return tuple(n for n in self.nodes if isinstance(n, ExternCall))

    def format(self) -> str:
        """The graph as text: inputs, constants, buffers, nodes (loop nodes with their
        loop-IR bodies over ``i0, i1, ...``, reductions over ``r0, ...``), outputs."""
        lines = [f"lowered graph {self.graph_name!r} on {self.device}"]
        for inp in self.inputs:
            info = self.buffers.get(inp.name)
            lines.append(f"  input {_buffer_text(info) if info else inp.name}")
        for var, key in self.constants.items():
            info = self.buffers.get(var)
            lines.append(f"  constant {_buffer_text(info) if info else var} = "
                         f"tensors[{key!r}]")
        for info in self.buffers.values():
            if info.kind not in ("input", "constant"):
                lines.append(f"  buffer {_buffer_text(info)} ({info.kind})")
        for node in self.nodes:
            lines.extend("  " + line for line in format_node(node))
        lines.append("  outputs " + ", ".join(str(o) for o in self.outputs))
        if self.fallbacks:
            counts = ", ".join(f"{op} x{n}" for op, n in sorted(self.fallbacks.items()))
            lines.append(f"  fallbacks {counts}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def _buffer_text(info: BufferInfo) -> str:
    offset = f" offset {render_size(info.storage_offset, '//')}" \
        if info.storage_offset != 0 else ""
    return (f"{info.name}: {dtype_name(info.dtype)}{sizes_text(info.sizes)} "
            f"strides {sizes_text(info.strides)}{offset}")


def sizes_text(sizes: tuple[Size, ...]) -> str:
    """``[s0, 64]``: sizes as a list in the text forms (ints print as before)."""
    return "[" + ", ".join(render_size(s, "//") for s in sizes) + "]"


def _vars(sizes: tuple[Size, ...], prefix: str) -> list[IndexExpr]:
    return [Var(f"{prefix}{d}", s) if s != 1 else Int(0) for d, s in enumerate(sizes)]


def _origins(origins: tuple[str, ...]) -> str:
    return f"  # from {', '.join(origins)}" if origins else ""


def format_node(node: ScheduledNode) -> list[str]:
    """One lowered node as lines of text (a loop node: a header and its body)."""
    if isinstance(node, ExternCall):
        args = [str(a) for a in node.args] + [f"{k}={v}" for k, v in node.kwargs.items()]
        outs = ", ".join(o or "_" for o in node.outputs)
        kind = "fallback" if node.is_fallback else "extern"
        note = f" ({node.note})" if node.note else ""
        return [f"{outs} = {kind} {node.target}({', '.join(args)}){note}"
                f"{_origins(node.origins)}"]
    b = BodyBuilder()
    if isinstance(node, ReductionBuffer):
        outer = _vars(node.outer_sizes, "i")
        red = _vars(node.reduction_sizes, "r")
        # NOTE: Int(0) for size-1 dims, as the scheduler's loop variables
        node.emit(b, outer, red)
        head = (f"{node.name} = reduction {node.op} over dims {list(node.dims)} of "
                f"{sizes_text(node.full_sizes)}{' keepdim' if node.keepdim else ''}")
    elif isinstance(node, MatmulBuffer):
        node.emit(b, _vars(node.outer_sizes, "i"), _vars(node.reduction_sizes, "r"))
        head = (f"{node.name} = matmul over {sizes_text(node.outer_sizes)} reduce "
                f"{sizes_text(node.reduction_sizes)} ({node.template.describe()})")
    elif isinstance(node, ScatterBuffer):
        node.emit(b, _vars(node.sizes, "i"))
        head = (f"{node.name} {'+' if node.accumulate else ''}= scatter over "
                f"{sizes_text(node.sizes)}")
    else:
        node.emit(b, _vars(node.sizes, "i"))
        head = f"{node.name} = pointwise over {sizes_text(node.sizes)}"
    return [head + ":" + _origins(node.origins)] + ["    " + format_stmt(s) for s in b.stmts]


__all__ = ["BUFFER_KINDS", "BufferInfo", "GraphInput", "LoweredGraph", "MutatedInput",
           "format_node", "sizes_text"]
