"""Recording and replaying one graph of a compiled program: :class:`GraphedExecutor`.

A call of a graph with CUDA graphs goes (per input signature, ``cudagraphs_inputs``):

1. first call of a signature: the plain compiled code runs (warm-up: Triton's JIT,
   cuBLAS handles and lazy initialisation happen outside the capture);
2. second call: the inputs are copied into static buffers and the plain code is
   captured into a ``torch.cuda.CUDAGraph`` in the model's pool, then replayed;
3. later calls: inputs copied in, one replay.

**Outputs are views, revoked at the next replay.** A replay writes its results where the
recording put them, so the next replay overwrites them. A forward graph's user outputs
are handed out without a copy, and reading one kept until its recording replays again
raises (:mod:`ember.runtime.cudagraphs_outputs`; a torch that cannot revoke a storage
gets copies). Gradients, which autograd may keep as ``.grad``, are copied. The tensors a
forward saves for its backward are not copied; :mod:`ember.runtime.cudagraphs_pool`
keeps track of them.
Mutated inputs are returned as views of the static results: ``ProgramCallable`` copies
them back into the caller's inputs right after the replay.

A parameter (an ``IN_PLACE`` input) found at another address re-records the graph
(``CudaGraphStats.rerecords``); after :data:`~ember.runtime.cudagraphs_policy.RERECORD_LIMIT`
re-recordings its signature runs plain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import torch
from ember.runtime.cudagraphs_inputs import (
    InputRole,
    StaticInputs,
    keyed_positions,
    signature_of,
)
from ember.runtime.cudagraphs_policy import (
    CPU_INPUT,
    RECORDING_FAILED,
    RERECORD_LIMIT,
    SAVED_IN_USE,
    SHAPE_LIMIT,
    STORAGE_CHANGES,
)
from ember.runtime.cudagraphs_outputs import HandedOutputs, aliasing_supported
from ember.runtime.cudagraphs_pool import ModelGraphs, SavedHold
from ember.runtime.ir import InputSpec, OutputKind
from ember.runtime.logs import log

Executor = Callable[[list[Any]], list[Any]]


class GraphCapture(Protocol):
    """How graphs are captured: :class:`CudaCapture` (tests substitute an emulation)."""

    device_type: str

    def new_pool(self) -> object:
        """A memory pool the model's recordings share."""
        ...

    def record(self, run: Callable[[], list[Any]],
               pool: object) -> tuple[Callable[[], None], list[Any]]:
        """Capture ``run()`` into a graph allocating from ``pool``; return the graph's
        replay function and the results the capture left (filled by each replay). The
        capture does not compute: the caller replays once."""
        ...


class CudaCapture:
    """Capture with ``torch.cuda.CUDAGraph`` (on torch's side capture stream).

    **The pool belongs to the model.** A pool from ``graph_pool_handle()`` lives only
    while a graph recorded into it does: once the model's last graph is dropped (a
    parameter moved and its graph is recorded again, a signature refused after its
    re-recordings), the next capture into that handle fails inside ``capture_begin``
    (an internal assert of torch's caching allocator) after torch has put the CUDA
    random generator into capture state, and every later random op of the process
    raises "Offset increment outside graph capture". So the pool is a
    ``torch.cuda.MemPool`` that the model holds (its reference keeps the pool alive);
    on a torch without ``MemPool`` the last graph recorded is kept alive instead, until
    another one replaces it.
    """

    device_type = "cuda"

    def __init__(self) -> None:
        self._keep_alive: object | None = None  # the last graph (no MemPool only)

    def new_pool(self) -> object:
        """A ``torch.cuda.MemPool`` (held by the model), or a ``graph_pool_handle()``
        on a torch without one."""
        mem_pool = getattr(torch.cuda, "MemPool", None)
        return mem_pool() if mem_pool is not None else torch.cuda.graph_pool_handle()

    def record(self, run: Callable[[], list[Any]],
               pool: object) -> tuple[Callable[[], None], list[Any]]:
        """See :meth:`GraphCapture.record`."""
        graph = torch.cuda.CUDAGraph()
        handle = getattr(pool, "id", pool)  # a MemPool's id, or the handle itself
        # NOTE: "thread_local": a backward graph is captured on autograd's device thread
        # while other threads (the caller's, Triton's compile workers) may call CUDA
        with torch.cuda.graph(graph, pool=cast(Any, handle),
                              capture_error_mode="thread_local"):
            outputs = run()
        if not hasattr(pool, "id"):
            self._keep_alive = graph
        return graph.replay, outputs


@dataclass
class Recording:
    """One captured graph: its static inputs, replay function and static results."""

    sequence: int
    inputs: StaticInputs
    replay: Callable[[], None]
    outputs: list[Any]
    stable: set[int]  # inputs kept in place for their stable address (no parameters)
    handed: HandedOutputs = field(default_factory=HandedOutputs)  # the latest replay's


class GraphedExecutor:
    """The executor of one graph with CUDA graphs: the plain executor ``plain`` for
    warm-up and refused calls, recordings per input signature otherwise.

    Args:
        plain: the graph's compiled executor.
        graph_name: ``forward`` or ``backward`` (in log lines and reasons).
        input_specs: the graph's input specs (parameters and buffers stay in place).
        output_kinds: each output's kind (what is copied out, what is held).
        model: the model's shared state (pool, held saved tensors, stats).
        capture: how graphs are captured.
        max_shapes: input signatures recorded at most; later ones run plain.
        mutated: positions of the inputs the graph mutates (copied back after each
            call): one found at its warm-up address is read in place until it moves.

    """

    def __init__(self, plain: Executor, graph_name: str, input_specs: Sequence[InputSpec],
                 output_kinds: Sequence[OutputKind], model: ModelGraphs,
                 capture: GraphCapture, max_shapes: int,
                 mutated: Set[int] = frozenset()) -> None:
        self.plain = plain
        self.mutated = set(mutated)
        self.graph_name = graph_name
        self.input_specs = list(input_specs)
        self.output_kinds = list(output_kinds)
        self.model = model
        self.capture = capture
        self.max_shapes = max_shapes
        self.recordings: dict[tuple[object, ...], Recording] = {}
        self._warm: set[tuple[object, ...]] = set()
        self._refused: dict[tuple[object, ...], str] = {}
        self._rerecords: dict[tuple[object, ...], int] = {}
        self._keyed: list[int] | None = None  # the inputs a call's signature reads
        self._warm_pointers: dict[tuple[object, ...], list[int]] = {}
        self._demoted: set[int] = set()  # inputs kept in place once, copied since they moved
        self.last_hold: SavedHold | None = None
        """The saved tensors of the latest call, when it replayed a forward graph (the
        autograd glue keeps it for the backward: ``SavedHold.check``)."""

    def _run_plain(self, inputs: list[Any], reason: str, detail: str = "") -> list[Any]:
        self.model.stats.plain_calls[reason] += 1
        if reason != "warm-up":
            self.model.skips.skip(self.graph_name, reason, detail)
        return self.plain(inputs)

    def __call__(self, inputs: list[Any]) -> list[Any]:
        model = self.model
        self.last_hold = None
        if self._keyed is None or len(self._keyed) > len(inputs):
            self._keyed = keyed_positions(self.input_specs, len(inputs))
        key = signature_of(inputs, self._keyed)
        refused = self._refused.get(key)
        if refused is not None:
            return self._run_plain(inputs, refused)
        recording = self.recordings.get(key)
        if recording is None and key not in self._warm:
            device = self._other_device(inputs)
            if device:
                self._refused[key] = CPU_INPUT
                return self._run_plain(inputs, CPU_INPUT, device)
            if len(self._warm) >= self.max_shapes:
                self._refused[key] = SHAPE_LIMIT
                return self._run_plain(inputs, SHAPE_LIMIT, f"{self.max_shapes} recorded")
            self._warm.add(key)
            self._warm_pointers[key] = [x.data_ptr() if isinstance(x, torch.Tensor) else 0
                                        for x in inputs]
            return self._run_plain(inputs, "warm-up")
        if recording is not None:
            moved = recording.inputs.moved_parameter(inputs)
            if moved is not None:
                recording = self._parameter_moved(key, moved, recording.stable)
                if recording is None and key in self._refused:
                    return self._run_plain(inputs, STORAGE_CHANGES)
            elif recording.inputs.moved_pool_output(inputs):
                return self._run_plain(inputs, SAVED_IN_USE,
                                       "saved tensors are not where the forward's replay "
                                       "left them (the forward ran plain)")
        sequence = recording.sequence if recording is not None else model.next_sequence()
        if not model.may_replay(sequence):
            return self._run_plain(inputs, SAVED_IN_USE)
        if recording is None:
            try:
                recording = self._record(inputs, key, sequence)
            except RuntimeError as e:  # torch's capture errors
                self._refused[key] = RECORDING_FAILED
                first_line = (str(e).splitlines() or [""])[0]
                return self._run_plain(inputs, RECORDING_FAILED, first_line)
        else:
            recording.inputs.load(inputs)
        # NOTE: after the inputs are loaded: one of them may be an output it revokes
        recording.handed.revoke()
        recording.replay()
        model.stats.replays += 1
        return self._results(recording)

    def _other_device(self, inputs: list[Any]) -> str:
        """Which tensor input is not on the capture's device type ("" if none)."""
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and x.device.type != self.capture.device_type:
                return f"input {i} is on {x.device}"
        return ""

    def _parameter_moved(self, key: tuple[object, ...], position: int,
                         stable: set[int]) -> Recording | None:
        del self.recordings[key]
        if position in stable:
            self._demoted.add(position)
            self.model.stats.rerecords += 1
            log("cudagraphs", f"graph {self.graph_name!r}: input {position}, kept in place "
                              "for its stable address, moved; recording again with it copied")
            return None
        count = self._rerecords.get(key, 0) + 1
        self._rerecords[key] = count
        if count > RERECORD_LIMIT:
            self._refused[key] = STORAGE_CHANGES
            return None
        self.model.stats.rerecords += 1
        log("cudagraphs", f"graph {self.graph_name!r}: input {position} (a parameter or "
                          "buffer) moved to new storage; recording it again")
        return None

    def _stable_positions(self, key: tuple[object, ...]) -> set[int]:
        """Mutated inputs of ``key``'s warm-up call that are no parameter by their spec
        (the candidates kept in place for a stable address: a module's buffers)."""
        pointers = self._warm_pointers.get(key, [])
        keyed = set(self._keyed or ())
        return {i for i in self.mutated if i < len(pointers) and pointers[i]
                and i in keyed and i not in self._demoted}

    def _record(self, inputs: list[Any], key: tuple[object, ...], sequence: int) -> Recording:
        model = self.model
        pointers = self._warm_pointers.get(key, [])
        stable = {i for i in self._stable_positions(key)
                  if isinstance(inputs[i], torch.Tensor) and not isinstance(
                      inputs[i], torch.nn.Parameter) and inputs[i].data_ptr() == pointers[i]}
        static = StaticInputs.make(inputs, self.input_specs, model.in_place,
                                   model.pool_outputs, stable)
        replay, outputs = self.capture.record(lambda: self.plain(list(static.tensors)),
                                              model.pool)
        recording = Recording(sequence, static, replay, outputs, stable)
        self.recordings[key] = recording
        model.stats.recordings += 1
        model.in_place.update(p for p, role in zip(static.pointers, static.roles)
                              if role is InputRole.IN_PLACE)
        model.pool_outputs.update(o.data_ptr() for o in outputs
                                  if isinstance(o, torch.Tensor)
                                  and o.data_ptr() not in model.in_place)
        log("cudagraphs", lambda: f"graph {self.graph_name!r}: recorded a CUDA graph for "
            f"input shapes {[tuple(k[0]) if isinstance(k, tuple) else k for k in key]}")
        return recording

    def _results(self, recording: Recording) -> list[Any]:
        results: list[Any] = []
        saved: list[torch.Tensor] = []
        views = self.graph_name == "forward" and aliasing_supported()
        for i, value in enumerate(recording.outputs):
            kind = self.output_kinds[i] if i < len(self.output_kinds) else OutputKind.USER_OUTPUT
            if not isinstance(value, torch.Tensor):
                results.append(value)
            elif kind is OutputKind.SAVED_TENSOR:
                alias = value.detach()
                saved.append(alias)
                results.append(alias)
            elif kind is OutputKind.MUTATED_INPUT:
                results.append(value.detach())
            elif views and value.data_ptr() in self.model.pool_outputs:
                results.append(recording.handed.hand_out(value))
            else:
                results.append(value.clone())
        self.last_hold = self.model.hold(recording.sequence, saved)
        return results


__all__ = ["CudaCapture", "GraphCapture", "GraphedExecutor", "Recording"]
