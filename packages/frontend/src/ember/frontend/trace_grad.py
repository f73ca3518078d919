"""Grad-mode regions inside a traced function (the tracing capture).

The trace runs the function for real on fake tensors, so ``with torch.no_grad():``,
``torch.enable_grad()`` and ``@torch.no_grad()`` functions switch grad mode for real and
the recorded metadata says which values have autograd history. But the graph itself
held no trace of the regions: a backend that runs it under autograd (the ``eager``
backend's interpreter) differentiated through a ``no_grad`` region, and an
``enable_grad`` block under an outer ``no_grad`` made values without grad with every
backend (the graph ran and was compiled under the caller's ``no_grad``).

As in the strict capture (:mod:`ember.frontend.bytecode.grad_mode`, whose graph passes
this reuses): :class:`GradRegions`, a dispatch mode under the recorder, notes which
recorded nodes ran with grad mode off; :func:`grad_mode_of_graph` makes each such node
read its inputs that require grad through ``aten::detach`` and says which grad mode the
graph is compiled and run under (on when an ``enable_grad`` region under ``no_grad``
made a value that requires grad). In-place writes made with grad mode off keep reading
the tensor itself (an optimizer-style update writes the parameter, not a detached
alias): the trace keeps them as it did.
"""

from __future__ import annotations

from typing import Any

import torch
from ember.frontend.bytecode.grad_mode import GradSpans
from ember.runtime.ir import IRFormatError, Program
from ember.runtime.ir.op_queries import mutated_arguments
from ember.runtime.tracing import GraphRecorder

__all__ = ["GradRegions", "grad_mode_of_graph"]


class GradRegions(GradSpans):  # type: ignore[no-untyped-call]
    """Sees every op the recorder runs (entered before the recorder, so it sits under
    it) and notes where grad mode changed."""

    def __init__(self, recorder: GraphRecorder) -> None:
        super().__init__(recorder)
        self.grad_at_start = self._enabled

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        self.note(torch.is_grad_enabled())
        return func(*args, **(kwargs or {}))


def _writes(program: Program, names: set[str]) -> set[str]:
    """Those of ``names`` that write an argument in place."""
    written: set[str] = set()
    for node in program.forward.calls():
        if node.name not in names:
            continue
        try:
            if mutated_arguments(node):
                written.add(node.name)
        except IRFormatError:
            continue
    return written


def grad_mode_of_graph(program: Program, no_grad: set[str], grad_at_start: bool) -> bool:
    """Detach the inputs that require grad of the nodes of ``no_grad`` (names, from
    :meth:`GradRegions.no_grad_nodes` before the recorder finished) when the graph runs
    with grad mode on; return the grad mode it is compiled and run under."""
    # NOTE: imported here: the bytecode package imports the tracing capture
    from ember.frontend.bytecode.grad_mode import detach_no_grad_inputs, graph_grad_mode

    if not no_grad:  # every op ran with grad mode on: also in an enable_grad block
        return grad_at_start or any(n.op == "call" for n in program.forward.nodes)
    grad = graph_grad_mode(program.forward, grad_at_start, no_grad)
    if grad:
        detach_no_grad_inputs(program.forward, no_grad - _writes(program, no_grad))
    return grad
