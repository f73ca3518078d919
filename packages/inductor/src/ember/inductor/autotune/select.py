"""Choosing among candidates: :func:`select` and the block that switches it on.

A choice is identified by its *kind* (``"mm"``, ``"pointwise"``, ``"reduction"``) and a
*key* of JSON values (shapes, dtypes as text, strides, a kernel digest). With autotuning
on (:func:`autotuning`), :func:`select` answers from the on-disk cache (:mod:`.cache`)
when the key was tuned before on this device with these library versions; otherwise it
builds and times every candidate (:mod:`.timing`), stores the fastest and returns it.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
from ember.inductor.autotune import cache, timing
from ember.inductor.autotune.progress import Progress
from ember.runtime.logs import log


@dataclass(frozen=True)
class Candidate:
    """One way to implement a choice.

    Attributes:
        name: names the candidate among its siblings, and is what :func:`select` returns
            and the cache stores (``"extern_mm"``, ``"x1024_w4"``).
        make_runner: builds the candidate's inputs and kernel on the device being tuned
            for (:func:`tuning_device`) and returns a callable that runs it once. Called
            at most once per :func:`select` that times, never on a cache hit.
    """

    name: str
    make_runner: Callable[[], Callable[[], None]]


@dataclass
class TuningReport:
    """What the choices of one :func:`autotuning` block cost: ``benchmarked`` choices
    timed on the device, ``cached`` ones answered by the cache, ``failed`` candidates
    skipped (their build or run raised), ``defaulted`` choices where every candidate
    failed (the heuristic's choice was kept)."""

    benchmarked: int = 0
    cached: int = 0
    failed: int = 0
    defaulted: int = 0

    def to_json(self) -> dict[str, int]:
        """The counts, as the compiled program's ``metadata["autotune"]`` holds them."""
        return dataclasses.asdict(self)


class AutotuneWarning(UserWarning):
    """Every candidate of a choice failed to build or run; the default was kept."""


@dataclass(frozen=True)
class _State:
    enabled: bool
    report: TuningReport
    device: torch.device | None = None


_OFF = _State(False, TuningReport())  # outside every block: nothing is counted
_STATE: contextvars.ContextVar[_State | None] = contextvars.ContextVar(
    "ember_autotune", default=None)


def _current() -> _State:
    return _STATE.get() or _OFF


@contextlib.contextmanager
def _state(new: _State) -> Iterator[None]:
    token = _STATE.set(new)
    try:
        yield
    finally:
        _STATE.reset(token)


def autotuning(enabled: bool) -> contextlib.AbstractContextManager[None]:
    """Within the block, :func:`select` times candidates (``enabled``) or answers the
    default without timing (not ``enabled``). Each block counts its own
    :func:`tuning_report`."""
    return _state(_State(enabled, TuningReport(), _current().device))


def autotune_enabled() -> bool:
    """Whether the current block autotunes (see :func:`autotuning`)."""
    return _current().enabled


def tuning_report() -> TuningReport:
    """The counts of the current :func:`autotuning` block."""
    return _current().report


def tuning_device(device: torch.device | str) -> contextlib.AbstractContextManager[None]:
    """Within the block, candidates are built and timed on ``device`` (the compiler
    sets it to the device of the graph being compiled)."""
    return _state(dataclasses.replace(_current(), device=torch.device(device)))


def tuning_target() -> torch.device:
    """The device candidates are built and timed on: :func:`tuning_device`'s, else the
    current CUDA device when there is one, else the CPU (Triton's interpreter)."""
    device = _current().device
    if device is not None:
        return device
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _canonical_key(kind: str, key: Mapping[str, object]) -> object:
    """``key`` as plain JSON (tuples become lists), checked to hold JSON values only."""
    try:
        return json.loads(json.dumps(dict(key), sort_keys=True, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise TypeError(f"autotune key of kind {kind!r} must hold JSON values only "
                        f"(ints, floats, strings, lists; dtypes as text): {e}") from e


def select(kind: str, key: Mapping[str, object], candidates: Sequence[Candidate],
           default: str) -> str:
    """The name of the candidate to use for the choice ``(kind, key)``.

    Autotuning off (outside ``autotuning(True)``): ``default``, with no timing and no
    cache read. On: the cached decision for ``(kind, key)`` on this device with these
    torch/Triton/ember-inductor versions when there is one; else every candidate is
    built and timed on :func:`tuning_target` (a progress bar on stderr when it is a
    terminal, a line under ``EMBER_LOGS=autotune`` always), the fastest is stored and
    returned. A candidate whose build or run raises is skipped (logged, counted in
    :func:`tuning_report`); when all fail, ``default`` is returned with an
    :class:`AutotuneWarning`.

    Args:
        kind: what is chosen (a file-name-safe word: ``mm``, ``pointwise``).
        key: what the choice depends on, as JSON values.
        candidates: the implementations, with distinct names.
        default: the heuristic's choice (usually one of the candidates' names).

    Raises:
        ValueError: ``kind`` is not a lowercase word, or two candidates share a name.
        TypeError: ``key`` holds a value that is not JSON.
    """
    state = _current()
    if not state.enabled:
        return default
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise ValueError(f"autotune {kind!r}: candidate names are not distinct: {names}")
    if not candidates or names == [default]:
        return default
    device = tuning_target()
    entry = cache.EntryKey(kind, _canonical_key(kind, key), cache.device_description(device),
                           cache.versions())
    cached = cache.lookup(entry)
    if cached is not None and cached in names:
        state.report.cached += 1
        log("autotune", f"{kind} {entry.key_text()}: {cached} (cached)")
        return cached
    if cached is not None:
        log("autotune", f"{kind} {entry.key_text()}: the cached choice {cached!r} is no "
                        "candidate any more; timing again")
    timings = _time_all(kind, candidates, device, state.report)
    state.report.benchmarked += 1
    measured = {name: t for name, t in timings.items() if isinstance(t, float)}
    summary = ", ".join(f"{name} {_format_timing(t)}" for name, t in timings.items())
    if not measured:
        state.report.defaulted += 1
        message = (f"autotune {kind} {entry.key_text()}: every candidate failed "
                   f"({summary}); using the default {default!r}")
        warnings.warn(message, AutotuneWarning, stacklevel=2)
        log("fallbacks", message)
        log("autotune", message)
        return default
    best = min(measured, key=lambda name: measured[name])  # first of equal times
    cache.store(entry, best, {n: (t if isinstance(t, float) else None)
                              for n, t in timings.items()})
    log("autotune", f"{kind} {entry.key_text()}: {best} ({summary})")
    return best


def _time_all(kind: str, candidates: Sequence[Candidate], device: torch.device,
              report: TuningReport) -> dict[str, float | str]:
    """Each candidate's median time in ms, or the text of the error that stopped it."""
    results: dict[str, float | str] = {}
    progress = Progress(kind, len(candidates))
    try:
        for index, candidate in enumerate(candidates):
            progress.step(index, candidate.name)
            results[candidate.name] = _time_one(kind, candidate, device, report)
    finally:
        progress.close()
    return results


def _time_one(kind: str, candidate: Candidate, device: torch.device,
              report: TuningReport) -> float | str:
    try:
        run = candidate.make_runner()
        return timing.median_ms(run, device)
    # NOTE: a candidate may fail in any way its compiler or kernel can (Triton's
    # compilation errors, out of shared memory, an illegal launch): whatever it raises
    # only removes it from this choice, never the compile.
    except Exception as e:  # noqa: BLE001
        report.failed += 1
        error = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        log("autotune", f"{kind}: candidate {candidate.name} failed ({error}); skipped")
        return f"failed ({error})"


def _format_timing(t: float | str) -> str:
    return f"{t:.4f} ms" if isinstance(t, float) else t
