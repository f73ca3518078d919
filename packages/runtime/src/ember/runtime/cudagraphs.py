"""CUDA graphs for compiled programs: ``mode="reduce-overhead"`` (and ``max-autotune``).

A compiled program called with the same input shapes launches the same kernels every
time; a CUDA graph records those launches once and replays them with one call, so a
small model stops paying Python and launch overhead per kernel. The pipeline turns it
on for every mode whose features include ``"cudagraphs"``
(:data:`ember.runtime.pipeline.MODE_FEATURES`) by calling
:meth:`ember.runtime.callable.ProgramCallable.enable_cuda_graphs`, which wraps the
executor of each graph (forward, and backward when training) in a
:class:`~ember.runtime.cudagraphs_replay.GraphedExecutor`.

The pieces, one concept a module:

======================================  ==============================================
module                                  concept
======================================  ==============================================
``cudagraphs_policy``                   which graphs and calls are not recorded, and
                                        why (logged under ``EMBER_LOGS=cudagraphs``,
                                        counted in ``cudagraph_skips``)
``cudagraphs_inputs``                   static inputs: in place, or copied in
``cudagraphs_replay``                   warm-up, recording, replay, copied-out outputs
``cudagraphs_pool``                     the model's one memory pool, saved tensors in
                                        use, the step marker, statistics
======================================  ==============================================

User guide: ``docs/cuda-graphs.md``.
"""

from __future__ import annotations

from ember.runtime.config import config
from ember.runtime.cudagraphs_policy import (
    CPU_TENSORS,
    SkipLog,
    aliased_user_inputs,
    cudagraph_skips,
    why_not_recorded,
)
from ember.runtime.cudagraphs_pool import (
    CudaGraphStats,
    ModelGraphs,
    OverwrittenSavedTensorError,
    mark_step_begin,
)
from ember.runtime.cudagraphs_replay import CudaCapture, GraphCapture, GraphedExecutor
from ember.runtime.executor import Executor, ExecutorFactory
from ember.runtime.ir import OutputKind, OutputSpec, Program

NOT_COMPILED = "the program is not compiled (only the inductor backend's are recorded)"
"""Reason: an ``aten``/``core-functional`` program runs on the interpreter, whose ops
autograd records as they run; a replay would lose that history."""


class CudaGraphs:
    """The CUDA graphs of one compiled program: one memory pool and one set of
    statistics for all its graphs.

    Args:
        program: the compiled program.
        capture: how graphs are captured (default :class:`CudaCapture`).
        max_shapes: input signatures recorded per graph (default
            ``EMBER_CUDAGRAPH_SHAPES``).
    """

    def __init__(self, program: Program, capture: GraphCapture | None = None,
                 max_shapes: int | None = None) -> None:
        self.program = program
        self.capture: GraphCapture = capture if capture is not None else CudaCapture()
        self.max_shapes = config.cudagraph_shapes if max_shapes is None else max_shapes
        self.model = ModelGraphs(self.capture.new_pool)
        self.graphs: dict[str, GraphedExecutor] = {}

    @property
    def stats(self) -> CudaGraphStats:
        """Recordings, replays and plain calls by reason."""
        return self.model.stats

    @property
    def skips(self) -> SkipLog:
        """The reasons logged for this program (``skips.seen``: (graph, reason) pairs)."""
        return self.model.skips

    def wrap(self, executor: Executor, graph_name: str) -> Executor:
        """``executor`` with CUDA graphs, or ``executor`` itself when the graph cannot
        be recorded (the reason is logged once and counted)."""
        graph = self.program.graphs[graph_name]
        refusal = why_not_recorded(graph, self.capture.device_type)
        if refusal is None and graph_name == "forward":
            refusal = aliased_user_inputs(self.program)
        if refusal is None and self.program.dialect != "compiled":
            refusal = (NOT_COMPILED, f"dialect {self.program.dialect!r}")
        if refusal is not None:
            self.model.skips.skip(graph_name, *refusal)
            return executor
        specs = self.program.signature.inputs.get(graph_name, [])
        outputs = (self.program.signature.outputs.get(graph_name)
                   or [OutputSpec()] * len(graph.output_values))
        positions = {p.name: i for i, p in enumerate(graph.placeholders)}
        mutated = {positions[s.target] for s in outputs
                   if s.kind is OutputKind.MUTATED_INPUT and s.target in positions}
        graphed = GraphedExecutor(executor, graph_name, specs, [s.kind for s in outputs],
                                  self.model, self.capture, self.max_shapes, mutated)
        self.graphs[graph_name] = graphed
        return graphed

    def wrapping(self, factory: ExecutorFactory) -> ExecutorFactory:
        """An executor factory whose executors are wrapped by :meth:`wrap`."""
        def make(program: Program, graph_name: str) -> Executor:
            return self.wrap(factory(program, graph_name), graph_name)
        return make


__all__ = [
    "CPU_TENSORS", "NOT_COMPILED", "CudaGraphStats", "CudaGraphs",
    "OverwrittenSavedTensorError", "cudagraph_skips", "mark_step_begin",
]
