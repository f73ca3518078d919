"""The state one compiled model's CUDA graphs share: the memory pool, the saved tensors
still in use, the step marker and the statistics.

**One pool.** Every graph the model records (forward and backward, every input shape)
allocates from one memory pool (a ``torch.cuda.MemPool`` the model holds), so the memory of
one graph's temporaries is reused by the next recording. Each recording keeps its
results allocated for good. The price: replaying a graph may overwrite the results of a
graph recorded *before* it (its temporaries may sit where a later recording's results
were put), never those of a graph recorded after it.

**Saved tensors in use.** Outputs a user sees are copied out of the pool
(:mod:`ember.runtime.cudagraphs_replay`), but the tensors a training forward saves for
its backward stay where the replay wrote them. Each forward replay holds its saved
tensors (weak references, with the recording's sequence number) until autograd lets
them go (after the backward, or with the graph). While one is held, a recording made no
later than it does not replay; its call runs the plain compiled code
(:data:`~ember.runtime.cudagraphs_policy.SAVED_IN_USE`). The own backward of a forward
is recorded after it, so the usual forward, backward, forward, ... loop always replays.

**Step marker.** :func:`mark_step_begin` says a new training step begins: saved tensors
held from before it are released (the next replay may overwrite them). A backward that
later reads them raises :class:`OverwrittenSavedTensorError` (``SavedHold.check``, called
by ``ember.runtime.autograd``) instead of computing gradients from overwritten values.
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from ember.runtime.cudagraphs_policy import SkipLog

_step = 0


def mark_step_begin() -> None:
    """Mark the start of a training step for every model compiled with CUDA graphs
    (``mode="reduce-overhead"``): the saved tensors of forward calls made before it are
    no longer needed, and the next replay may overwrite them.

    Call it at the top of a training loop whose forward calls are not always followed
    by their backward (a forward kept for logging, gradient accumulation with
    ``retain_graph``): without it those calls run plain (correct, slower).
    """
    global _step
    _step += 1


def current_step() -> int:
    """How many times :func:`mark_step_begin` was called in this process."""
    return _step


class OverwrittenSavedTensorError(RuntimeError):
    """A backward reads tensors that a forward's CUDA graph replay saved and a later
    replay overwrote (released by ``mark_step_begin()``)."""


@dataclass
class CudaGraphStats:
    """What one compiled model's CUDA graphs did: ``recordings`` (graphs captured,
    re-recordings included), ``rerecords`` (of them, after a parameter moved),
    ``replays``, and ``plain_calls`` (calls that ran the plain compiled code, by
    reason: ``"warm-up"`` or a reason of :mod:`ember.runtime.cudagraphs_policy`)."""

    recordings: int = 0
    rerecords: int = 0
    replays: int = 0
    plain_calls: collections.Counter[str] = field(default_factory=collections.Counter)


@dataclass
class SavedHold:
    """The saved tensors one forward replay returned (weak references), with the
    recording's sequence number and the step they were made in. ``autograd`` keeps it
    on the backward's context and calls :meth:`check` before reading them."""

    sequence: int
    step: int
    tensors: list[weakref.ref[torch.Tensor]]
    overwritten: bool = False

    def alive(self) -> list[torch.Tensor]:
        """The saved tensors still referenced (by autograd, until the backward)."""
        return [t for t in (r() for r in self.tensors) if t is not None]

    def check(self) -> None:
        """Raise if a later replay overwrote these tensors.

        Raises:
            OverwrittenSavedTensorError: ``mark_step_begin()`` released them and a
                replay overwrote them before this backward ran.
        """
        if self.overwritten:
            raise OverwrittenSavedTensorError(
                "this backward reads tensors its forward saved in a CUDA graph, and a later "
                "replay overwrote them: mark_step_begin() released them before the backward "
                "ran. Run backward before the next step's forward calls, or call "
                "mark_step_begin() only once a step's backward is done")


class ModelGraphs:
    """The pool and bookkeeping shared by the graphs of one compiled model.

    Args:
        new_pool: makes the memory pool (called once, at the first recording).
    """

    def __init__(self, new_pool: Any) -> None:
        self._new_pool = new_pool
        self._pool: object | None = None
        self._sequence = 0
        self._held: list[SavedHold] = []
        self.stats = CudaGraphStats()
        self.skips = SkipLog()
        self.in_place: set[int] = set()  # addresses of recorded parameters
        self.pool_outputs: set[int] = set()  # addresses of recorded results

    @property
    def pool(self) -> object:
        """The model's memory pool handle (made on first use)."""
        if self._pool is None:
            self._pool = self._new_pool()
        return self._pool

    def next_sequence(self) -> int:
        """A number larger than every recording's so far (for a new recording)."""
        self._sequence += 1
        return self._sequence

    def may_replay(self, sequence: int) -> bool:
        """Whether the recording numbered ``sequence`` may replay now: no held saved
        tensors of a recording numbered ``sequence`` or later, once those held from an
        earlier step are released."""
        kept: list[SavedHold] = []
        blocked = False
        for held in self._held:
            alive = held.alive()
            if not alive:
                continue
            if held.sequence >= sequence and held.step != _step:
                held.overwritten = True  # released by the step marker
                continue
            kept.append(held)
            blocked = blocked or held.sequence >= sequence
        self._held = kept
        return not blocked

    def hold(self, sequence: int, saved: Sequence[torch.Tensor]) -> SavedHold | None:
        """Keep track of the saved tensors a replay of recording ``sequence`` returned."""
        if not saved:
            return None
        held = SavedHold(sequence, _step, [weakref.ref(t) for t in saved])
        self._held.append(held)
        return held


__all__ = ["CudaGraphStats", "ModelGraphs", "OverwrittenSavedTensorError", "SavedHold",
           "current_step", "mark_step_begin"]
