"""What lowering rules and lowering passes see of the lowering: :class:`LoweringContext`.

A Protocol, so that the rule table (:mod:`.registry`) and the passes
(:mod:`.extern_passes`) depend on this interface, not on
:class:`~ember.inductor.lowering.graph_lowering.GraphLowering`, which implements it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from ember.inductor.buffers import ScheduledNode
from ember.inductor.loop_ir import IndexExpr
from ember.inductor.lowering.checks import RuntimeCheck
from ember.inductor.lowering.extern_args import ExternArg
from ember.inductor.lowering.inlining import Uses
from ember.inductor.lowering.layout import LayoutState
from ember.inductor.lowering.lowered_graph import BufferInfo
from ember.inductor.lowering.rng_seed import GraphSeed
from ember.inductor.lowering.values import ElementFn, Lazy, Stored, Value
from ember.runtime.ir import Node, Program, TensorMeta


class LoweringContext(Protocol):
    """The lowering of one graph, as rules and passes use it."""

    program: Program
    device: torch.device
    buffers: dict[str, BufferInfo]
    constants: dict[str, str]
    nodes: list[ScheduledNode]
    checks: list[RuntimeCheck]
    eager_random: bool
    #: matmul nodes lowered as extern calls although the backend offers a template (the
    #: idle templates of a first lowering the schedule could not replace:
    #: ``idle_templates.py``)
    extern_matmuls: frozenset[str]
    rng: GraphSeed
    layout: LayoutState
    #: the consumers of each node of the graph being lowered
    uses: Uses
    #: the row-major zero-padded copies made of computed matmul operands (operand,
    #: copy), and the inputs that end in zero columns: name -> width
    #: (``saved_padding.py``)
    row_pads: list[tuple[Lazy, Stored]]
    zero_padded: dict[str, int]

    def fresh(self, prefix: str = "buf") -> str:
        """A new buffer name (``buf7``)."""
        ...

    def realize(self, value: Value, strides: tuple[int, ...] | None = None,
                origin: str = "", reuse: bool | None = None) -> Stored:
        """``value`` in a buffer (see GraphLowering.realize)."""
        ...

    def is_realized(self, value: Lazy) -> bool:
        """Whether ``value`` was already computed into a reusable buffer."""
        ...

    def external_loads(self, value: Lazy) -> list[tuple[str, IndexExpr]]:
        """The (buffer, index) pairs computing ``value`` loads."""
        ...

    def loaded_buffers(self, value: Lazy) -> set[str]:
        """The buffers computing ``value`` loads."""
        ...

    def extern_arg(self, value: Any) -> ExternArg:
        """A lowered value as an extern-call argument (a Lazy is realized first)."""
        ...

    def extern_step(self, target: str, args: list[ExternArg], kwargs: dict[str, ExternArg],
                    dtype: torch.dtype, sizes: tuple[int, ...], origin: str,
                    note: str) -> str:
        """Append an extern call with one row-major result; returns its variable."""
        ...

    def reduction(self, node: Node, op: str, fn: ElementFn, full_sizes: Sequence[int],
                  dims: Sequence[int], keepdim: bool, dtype: torch.dtype) -> Stored:
        """A buffer holding ``op`` over ``dims`` of ``fn``."""
        ...

    def traced_meta(self, arg: Any) -> TensorMeta | None:
        """The meta the program traced for argument ``arg`` of a node (a value
        reference), None for anything else."""
        ...

    def storage_offset_of(self, x: Stored) -> int:
        """The storage offset of ``x``'s buffer."""
        ...


@dataclass(frozen=True)
class ExternRequest:
    """An extern call before it is emitted: ``node`` with its lowered argument values
    (``args``, ``kwargs``) and result metas, as the lowering passes
    (:mod:`.extern_passes`) rewrite it."""

    node: Node
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    metas: tuple[Any, ...]


__all__ = ["ExternRequest", "LoweringContext"]
