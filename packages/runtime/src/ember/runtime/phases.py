"""The stage profile: named phase timings and counts of one compile.

Every stage times its phases with :func:`phase` (a context manager) or :func:`timed` (a
decorator); kernel builders :func:`count` what they did (builds, cache hits)::

    from ember.runtime.phases import count, phase
    with phase("lowering"):
        lowered = GraphLowering(...).run()
    count("cpp builds")

A phase entered inside another is recorded under the outer one's name
(``inductor/lowering``). :func:`compile_profile` (the pipeline's ``compile_program``)
delimits one compile (and so do the stages' own entry points, for a stage run alone;
nested, they add to the outer compile): it adopts the last phase recorded outside any
compile (the frontend's capture, which runs just before), collects everything until it
exits, then keeps the result for :func:`last_compile_profile` and prints it as one
table under ``EMBER_LOGS=stages``.

Phase names are free text; the ones Ember records:

==================================  ====================================================
phase                               what it times
==================================  ====================================================
``capture``                         the frontend's capture of the Python program
``program cache``                   the whole-program cache lookup (a hit ends here)
``aot``                             the aot stage: ``functionalize``, ``decompose``,
                                    ``autograd`` (the joint graph), ``partition``
``inductor``                        the inductor stage: ``passes``, ``lowering``,
                                    ``scheduling`` (fusion), ``codegen``, ``kernel builds``
``runtime load``                    building the executors (wrapper, kernel libraries)
==================================  ====================================================

Counts: ``cpp builds``, ``cpp cache hits``, ``triton builds``, ``deduped kernels``,
``build threads`` (the pool size of the last parallel build).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

from ember.runtime.logs import log, log_enabled


@dataclass
class PhaseTiming:
    """One phase of a compile: its path (``inductor/lowering``), the seconds spent in it
    (all its entries together) and how many times it was entered."""

    name: str
    seconds: float = 0.0
    calls: int = 0

    @property
    def depth(self) -> int:
        """How deeply the phase is nested (0 for a top-level phase)."""
        return self.name.count("/")


@dataclass
class CompileProfile:
    """The phases and counts of one compile (see the module docstring).

    ``phases`` keeps the order in which phases were first entered; ``total_s`` is the
    wall time of the compile plus the top-level phases recorded before it (capture)."""

    phases: dict[str, PhaseTiming] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    total_s: float = 0.0
    outside_s: float = 0.0  # top-level phases recorded before the compile began

    def seconds(self, name: str) -> float:
        """The seconds spent in phase ``name`` (0.0 when it never ran)."""
        found = self.phases.get(name)
        return 0.0 if found is None else found.seconds

    def to_json(self) -> dict[str, object]:
        """``{"total_s", "phases": {name: seconds}, "counts": {name: n}}`` (for benches)."""
        return {"total_s": round(self.total_s, 6),
                "phases": {n: round(p.seconds, 6) for n, p in self.phases.items()},
                "counts": dict(self.counts)}

    def format(self) -> str:
        """The profile as a table: one row a phase, indented by nesting, with its share
        of the total; the counts below."""
        total = self.total_s or sum(p.seconds for p in self.phases.values() if not p.depth)
        rows = [f"compile profile: {total:.3f} s",
                f"  {'phase':<34} {'seconds':>8} {'share':>6} {'calls':>5}"]
        for p in self.phases.values():
            label = "  " * p.depth + p.name.rsplit("/", 1)[-1]
            share = f"{100 * p.seconds / total:5.1f}%" if total > 0 else "     -"
            rows.append(f"  {label:<34} {p.seconds:8.3f} {share:>6} {p.calls:>5}")
        if self.counts:
            rows.append("  counts: " + ", ".join(f"{k} {v}" for k, v in self.counts.items()))
        return "\n".join(rows)


_lock = threading.Lock()
_open: CompileProfile | None = None  # the compile being profiled (any thread)
_pending: CompileProfile | None = None  # phases recorded before the next compile
_last: CompileProfile | None = None
KEPT_PROFILES = 100
"""How many finished profiles :func:`compile_profiles` keeps."""
_history: collections.deque[CompileProfile] = collections.deque(maxlen=KEPT_PROFILES)


class _ThreadState(threading.local):
    """Per thread: the phases open (outermost first), the seconds of compiles that ran
    inside them (excluded from their time), and a compile that ended inside an open
    phase (it finishes when that phase closes)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.excluded = 0.0
        self.finish_later: CompileProfile | None = None


_thread = _ThreadState()


def _collecting() -> CompileProfile:
    """The profile new timings go into: the open compile's, else the pending one."""
    global _pending
    if _open is not None:
        return _open
    if _pending is None:
        _pending = CompileProfile()
    return _pending


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as phase ``name`` (nested inside the phase open in this thread).

    A compile that runs inside the block (the strict capture compiles each graph as it
    captures it) is not counted in the block's time; the block's phase goes into that
    compile's profile, which is printed when the block ends."""
    global _pending
    state = _thread
    path = "/".join([*state.names, name])
    with _lock:
        if not state.names and _open is None:
            _pending = None  # only the phase right before a compile belongs to it
        # NOTE: entered now, so that a phase is listed before its sub-phases
        timing = _collecting().phases.setdefault(path, PhaseTiming(path))
    state.names.append(name)
    excluded = state.excluded
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start - (state.excluded - excluded)
        state.names.pop()
        with _lock:
            timing.seconds += elapsed
            timing.calls += 1
            if not state.names and _open is None and _pending is not None:
                _pending.outside_s += elapsed
        if not state.names and state.finish_later is not None:
            profile, state.finish_later = state.finish_later, None
            with _lock:
                profile.total_s += elapsed
            _finish(profile)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def timed(name: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """A decorator: every call of the function is timed as phase ``name``."""

    def decorate(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(fn)
        def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            with phase(name):
                return fn(*args, **kwargs)

        return run

    return decorate


def count(name: str, n: int = 1) -> None:
    """Add ``n`` to the count ``name`` of the current compile (any thread); outside a
    compile (a kernel library loaded when a program runs), nothing."""
    with _lock:
        if _open is not None:
            _open.counts[name] = _open.counts.get(name, 0) + n


def set_count(name: str, value: int) -> None:
    """Set the count ``name`` of the current compile (e.g. a pool size); outside a
    compile, nothing."""
    with _lock:
        if _open is not None:
            _open.counts[name] = value


@contextlib.contextmanager
def compile_profile() -> Iterator[CompileProfile]:
    """Profile one compile (see the module docstring). Nested inside another compile's
    profile it adds to that one instead (and prints nothing itself).

    Yields:
        the profile being collected; complete once the block exits (or, for a compile
        inside an open phase, once that phase closes).
    """
    global _open, _pending
    state = _thread
    with _lock:
        outer = _open
        profile = outer or _pending or CompileProfile()
        if outer is None:
            _open, _pending = profile, None
    if outer is not None:
        yield outer
        return
    enclosing, state.names = state.names, []  # the compile's phases are top-level
    start = time.perf_counter()
    try:
        yield profile
    finally:
        elapsed = time.perf_counter() - start
        state.names = enclosing
        state.excluded += elapsed
        with _lock:
            profile.total_s = profile.outside_s + elapsed
        if enclosing:
            state.finish_later = profile
        else:
            _finish(profile)


def _finish(profile: CompileProfile) -> None:
    """Close ``profile``: keep it as the last one, print it under ``stages``."""
    global _open, _last
    with _lock:
        if _open is profile:
            _open = None
        _last = profile
        _history.append(profile)
    if log_enabled("stages"):
        log("stages", profile.format)


def profiles_compile(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """A decorator: every call of ``fn`` is one compile (:func:`compile_profile`)."""

    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with compile_profile():
            return fn(*args, **kwargs)

    return run


def compile_profiles() -> list[CompileProfile]:
    """The profiles of the compiles that finished in this process, oldest first (the
    last :data:`KEPT_PROFILES`): a call that compiled several graphs (graph breaks, or
    a training step's separate compiles) has one each."""
    with _lock:
        return list(_history)


def last_compile_profile() -> CompileProfile | None:
    """The profile of the last compile that finished in this process (None before any)."""
    return _last


def discard_pending() -> None:
    """Drop the phases recorded outside any compile (a capture whose compile never came)."""
    global _pending
    with _lock:
        _pending = None
