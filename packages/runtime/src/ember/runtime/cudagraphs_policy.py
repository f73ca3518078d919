"""Why a graph is not recorded into a CUDA graph: the rules, read from the IR, and the
one-line log and count of each refusal.

A CUDA graph replays the kernels recorded once, with the same pointers and the same
sizes, and never returns to the host in between. A graph it cannot replay correctly
runs its plain compiled code instead; the reason is logged once per graph under
``EMBER_LOGS=cudagraphs`` and counted in :data:`cudagraph_skips` (one count per graph
and reason) and in the model's ``CudaGraphStats.plain_calls`` (one per call).

Decided once per graph, from the IR (:func:`why_not_recorded`):

=================================  ================================================
reason                             when
=================================  ================================================
:data:`CPU_TENSORS`                a placeholder or result lives outside the
                                   capture's device type (``cpu``: the C++ backend)
:data:`SEVERAL_DEVICES`            tensors on more than one CUDA device
:data:`SYNCHRONIZING`              an op of :data:`SYNCHRONIZING_OPS` (the host
                                   waits for a value the graph computes)
:data:`DATA_DEPENDENT`             a size the graph computes (an unbacked ``u0``:
                                   ``nonzero``, ``masked_select``)
:data:`ALIASED_INPUTS`             the forward takes user inputs captured as views
                                   of one another (``metadata["input_aliases"]``):
                                   static buffers would not share memory
=================================  ================================================

Decided per call (:mod:`ember.runtime.cudagraphs_replay`):

=================================  ================================================
:data:`CPU_INPUT`                  a tensor input is not on the graph's device
:data:`SHAPE_LIMIT`                an input-shape signature beyond
                                   ``EMBER_CUDAGRAPH_SHAPES`` recordings
:data:`STORAGE_CHANGES`            a parameter moved to new storage more than
                                   :data:`RERECORD_LIMIT` times
:data:`SAVED_IN_USE`               the saved tensors of an earlier replay still wait
                                   for their backward (one call runs plain)
:data:`RECORDING_FAILED`           torch refused the capture (``RuntimeError``, its
                                   message logged); the signature runs plain
=================================  ================================================

Random ops are recorded: Ember's compiled random ops draw their seed from torch's CUDA
generator (``lowering/random.py`` of the inductor), and eager's random kernels use the
same generator; CUDA graphs register it at capture and each replay reads its current
seed and offset from device memory and advances the offset, so consecutive replays
differ and ``torch.manual_seed`` makes them reproducible.
"""

from __future__ import annotations

import collections

from ember.runtime.ir import Graph, InputKind, Program, TensorMeta
from ember.runtime.ir.contracts import InputAliases
from ember.runtime.ir.symbolic import SymbolBinder
from ember.runtime.logs import log

CPU_TENSORS = "CPU tensors"
SEVERAL_DEVICES = "tensors on several devices"
SYNCHRONIZING = "an operation that synchronizes"
DATA_DEPENDENT = "data-dependent sizes"
CPU_INPUT = "CPU tensors among the inputs"
SHAPE_LIMIT = "more input shapes than EMBER_CUDAGRAPH_SHAPES"
STORAGE_CHANGES = "a parameter's storage keeps changing"
SAVED_IN_USE = "saved tensors of an earlier replay still wait for their backward"
ALIASED_INPUTS = "user inputs that share memory"
RECORDING_FAILED = "recording failed"

RERECORD_LIMIT = 8
"""Re-recordings of one input signature (a parameter moved to new storage) before it
runs plain for good."""

SYNCHRONIZING_OPS: dict[str, str] = {
    "aten::_local_scalar_dense.default": "reads a tensor's value on the host (.item())",
    "aten::item.default": "reads a tensor's value on the host (.item())",
    "aten::equal.default": "returns a host bool computed from the data",
    "aten::is_nonzero.default": "returns a host bool computed from the data",
    "aten::allclose.default": "returns a host bool computed from the data",
    "aten::nonzero.default": "its result size is read back from the device",
    "aten::masked_select.default": "its result size is read back from the device",
    "aten::_unique2.default": "its result size is read back from the device",
    "aten::unique_dim.default": "its result size is read back from the device",
    "aten::unique_consecutive.default": "its result size is read back from the device",
}
"""Ops the host must wait for (what each does), by qualified name: no graph holding
one is recorded."""

cudagraph_skips: collections.Counter[str] = collections.Counter()
"""Graphs not recorded (or calls of a recorded graph run plain for a lasting reason),
by reason; one count per graph and reason."""


def _metas(graph: Graph) -> list[tuple[str, TensorMeta]]:
    found: list[tuple[str, TensorMeta]] = []
    for node in graph.nodes:
        metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
        found += [(node.name, m) for m in metas if isinstance(m, TensorMeta)]
    return found


def _where(graph: Graph, name: str) -> str:
    source = graph.node(name).source
    return f"%{name}" + (f" ({source})" if source is not None else "")


def why_not_recorded(graph: Graph, device_type: str = "cuda") -> tuple[str, str] | None:
    """``(reason, detail)`` when ``graph`` cannot be recorded into a graph of
    ``device_type`` (the table above), else None. ``detail`` names the node and its
    source line."""
    devices: dict[str, str] = {}
    for name, meta in _metas(graph):
        if meta.device.type != device_type:
            return CPU_TENSORS, f"{_where(graph, name)} is on {meta.device}"
        devices.setdefault(str(meta.device), name)
    if len(devices) > 1:
        return SEVERAL_DEVICES, ", ".join(f"%{n} on {d}" for d, n in devices.items())
    for node in graph.calls():
        what = SYNCHRONIZING_OPS.get(node.target)
        if what is not None:
            return SYNCHRONIZING, f"{_where(graph, node.name)} {node.target} {what}"
    unbacked = SymbolBinder(graph).unbacked if graph.symbols else {}
    for symbol, site in unbacked.items():
        return DATA_DEPENDENT, f"{_where(graph, site.node)} computes size {symbol}"
    return None


def aliased_user_inputs(program: Program) -> tuple[str, str] | None:
    """``(ALIASED_INPUTS, detail)`` when the forward graph takes a user input captured as
    a view of another input (parameters and buffers stay in place, so their aliasing
    holds), else None."""
    in_place = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT)
    kinds = {s.name: s.kind for s in program.signature.inputs.get("forward", [])}
    for name, alias in InputAliases.from_program(program).by_input.items():
        if kinds.get(name) not in in_place or kinds.get(alias.base) not in in_place:
            return ALIASED_INPUTS, f"%{name} is a view of %{alias.base}"
    return None


class SkipLog:
    """The refusals of one compiled program: each (graph, reason) logged under
    ``cudagraphs`` and counted in :data:`cudagraph_skips` the first time only."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, str]] = set()

    def skip(self, graph_name: str, reason: str, detail: str = "") -> None:
        """Record that graph ``graph_name`` runs plain because of ``reason``."""
        if (graph_name, reason) in self.seen:
            return
        self.seen.add((graph_name, reason))
        cudagraph_skips[reason] += 1
        log("cudagraphs", f"graph {graph_name!r} runs without CUDA graphs: {reason}"
                          + (f": {detail}" if detail else ""))


__all__ = [
    "ALIASED_INPUTS",
    "CPU_INPUT",
    "CPU_TENSORS",
    "DATA_DEPENDENT",
    "RECORDING_FAILED",
    "RERECORD_LIMIT",
    "SAVED_IN_USE",
    "SEVERAL_DEVICES",
    "SHAPE_LIMIT",
    "STORAGE_CHANGES",
    "SYNCHRONIZING",
    "SYNCHRONIZING_OPS",
    "SkipLog",
    "aliased_user_inputs",
    "cudagraph_skips",
    "why_not_recorded",
]
