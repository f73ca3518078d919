"""Guards of a cache entry, compiled into one check function (both capture modes).

A :class:`GuardSet` holds the :class:`~ember.frontend.guard_model.Guard` s of one cache
entry, deduplicated, in the order they were installed; it renders them for
``EMBER_LOGS=guards`` and, on a miss, names the first that failed with the value it saw
and the user source line that installed it (:meth:`GuardSet.first_failure`).
:func:`compile_matcher` writes ONE Python function that fetches each source once, checks
every guard inline (conditions from :data:`~ember.frontend.guard_model.GUARD_KINDS`)
and returns the graph inputs, so a cache lookup costs one call.

The tracing capture checks guards over its call (:class:`~ember.frontend.trace_guards.
TraceCall`: the argument leaves, the module's parameters and buffers, the pytree spec);
the strict capture over the frame state at a resume point and the function's context.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from ember.frontend.guard_batch import MIN_BATCHED
from ember.frontend.guard_model import GUARD_KINDS, Guard, Source
from ember.frontend.guard_writer import Matcher, MatcherWriter, matcher_text
from ember.runtime.ir import SourceLocation
from ember.runtime.logs import log

__all__ = ["Guard", "GuardFailure", "GuardSet", "Matcher", "MatcherWriter", "Source",
           "compile_matcher", "matcher_text"]

@dataclass(frozen=True)
class GuardFailure:
    """The first guard that failed and why (``explanation``: the guard with the value it
    saw, ``x.shape == (3, 5) (got (4, 5))``)."""

    guard: Guard
    explanation: str

    def __str__(self) -> str:
        return self.explanation

    def located(self) -> str:
        """The explanation and the user source line whose capture installed the guard
        (``; guard from file:line in fn: text``)."""
        return f"{self.explanation}; guard from {self.guard.origin_text()}"


LENGTH_HINT = ("a container's length is part of the compiled code (code over its items "
               "is unrolled), so each new length compiles a new variant, as in "
               "torch.compile; keep the length fixed, or pass the items as one tensor "
               "(torch.stack)")


@dataclass
class GuardSet:
    """The guards of one cache entry, in the order they were installed. ``locate``,
    when set, gives the user source line being captured: each added guard without an
    origin gets it."""

    guards: list[Guard] = field(default_factory=list)
    locate: Callable[[], SourceLocation | None] | None = None
    _seen: set[tuple[Any, ...]] = field(default_factory=set)

    def add(self, guard: Guard) -> None:
        """Install ``guard`` unless an equal one is installed."""
        # NOTE: deduplicated by the Source objects themselves (their keys compare as dict
        # keys do), never by rendered text: two keys with one repr are two guards.
        key: tuple[Any, ...] = (guard.kind, guard.source if guard.source is not None
                                else _hashable(guard.expected))
        if guard.kind in ("remaining", "size_relation"):  # several facts about one source
            key = (*key, guard.expected)
        if key in self._seen:
            return
        self._seen.add(key)
        if guard.origin is None and self.locate is not None:
            guard = dataclasses.replace(guard, origin=self.locate())
        self.guards.append(guard)

    def set_origin(self, origin: SourceLocation | None) -> None:
        """Give every guard without an origin ``origin`` (the tracing capture's guards
        all come from the traced function's ``def`` line)."""
        self.guards = [g if g.origin is not None else dataclasses.replace(g, origin=origin)
                       for g in self.guards]

    def __len__(self) -> int:
        return len(self.guards)

    def describe(self) -> str:
        """One guard per line, for the ``guards`` log."""
        return "\n".join(f"  {g.describe()}" for g in self.guards)

    def matcher(self, inputs: Sequence[Source] = (), title: str | None = None,
                learn_after: int = 1) -> Matcher:
        """The one check function of these guards (see :func:`compile_matcher`)."""
        return compile_matcher(self.guards, inputs, title, learn_after)

    def first_failure(self, state: Any, ctx: Any) -> GuardFailure | None:
        """The first guard that fails on ``state`` (slow: checks them one at a time),
        explained; None when all pass."""
        for g in self.guards:
            if compile_matcher([g])(state, ctx) is None:
                return GuardFailure(g, explain_failure(g, state, ctx))
        return None

    def failures(self, state: Any, ctx: Any) -> list[tuple[Guard, Any]]:
        """Every guard that fails on ``state`` (slow), with the value its source holds
        (None for a guard without a source, or whose source cannot be read): what
        automatic dynamic shapes look at after a miss."""
        failed: list[tuple[Guard, Any]] = []
        for g in self.guards:
            if compile_matcher([g])(state, ctx) is None:
                failed.append((g, _fetched(g, state, ctx)))
        return failed

    def failure_text(self, state: Any, ctx: Any) -> str:
        """The first failing guard, with the value seen and the user source line that
        installed it, for recompile logs and the recompile-limit warning; for a length,
        what to do about it."""
        failure = self.first_failure(state, ctx)
        if failure is None:
            return "no guard failed"
        hint = f" ({LENGTH_HINT})" if failure.guard.kind == "len" else ""
        return failure.located() + hint


def explain_failure(guard: Guard, state: Any, ctx: Any) -> str:
    """``guard``, readably, with the value its source holds in ``state``."""
    kind = GUARD_KINDS[guard.kind]
    if guard.source is None:
        return kind.explain(guard, None)
    try:
        actual = guard.source.fetch(state, ctx)
    except Exception as e:  # noqa: BLE001 - the failure itself is what we report
        return f"{guard.source.expr()} is missing ({type(e).__name__}: {e})"
    return kind.explain(guard, actual)


def _fetched(guard: Guard, state: Any, ctx: Any) -> Any:
    if guard.source is None:
        return None
    try:
        return guard.source.fetch(state, ctx)
    except Exception:  # noqa: BLE001 - a source that cannot be read is a non-size failure
        return None


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return ("unhashable", id(value))
    return value


def compile_matcher(guards: Sequence[Guard], inputs: Sequence[Source] = (),
                    title: str | None = None, learn_after: int = 1) -> Matcher:
    """One generated function ``match(S, C)``: None when a guard fails (or fetching a
    guarded value raises), else the values of ``inputs``, fetched through the same
    locals the guards used. The generated text is ``match.__ember_source__``; with a
    ``title`` (a cache entry's check function, not a one-guard probe) it is also logged
    under ``EMBER_LOGS=guards``.

    With many guards on state reached from a root read every call (a model's
    parameters, submodules and attributes from ``self``), the function gets the fast
    path of :mod:`ember.frontend.guard_fast` after its ``learn_after``-th passing call:
    those guards are skipped while their stamp (dict versions, types, tensor metadata)
    holds.

    Raises:
        ValueError: a guard that cannot be written (a ``global`` guard on state with
            no reader).
    """
    w = MatcherWriter(batch_tensors=sum(g.kind == "tensor" for g in guards) >= MIN_BATCHED)
    for g in guards:
        w.guard(g)
    w.check_batch()
    result = "[" + ", ".join(w.ref(s) for s in inputs) + "]"
    fn, src = w.finish(w.lines, result)
    if title is not None:
        log("guards", lambda: f"check function of {title} ({len(guards)} guards):\n{src}")
    from ember.frontend import guard_fast  # it builds on this module

    if len(guards) >= guard_fast.FAST_PATH_MIN_GUARDS:
        fn = guard_fast.stamped_matcher(guards, inputs, fn, title, learn_after)
    return fn
