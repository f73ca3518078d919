"""The root-frame calls of one capture that run for real because a graph break happened
in the code they inlined, and the guards that decided it.

A break inside an inlined call restarts the capture with that whole call run for real at
the root instruction that made it (:class:`~.segment.InlinedBreak`); the segment ends
there. Its own guards cover only the code before that call, so a later call whose
values would let the callee run through (a model that changed itself at its first call
and logged about it, a flag turned off) would still hit it, and run the call through
the callee's compiled wrapper, and that one through its callees', frame after frame, at
every call. The abandoned captures' guards are what decided that the call breaks: the
segment keeps those it lacks as its *break check* (``Segment.break_guards``). When the
break check fails on a call whose own guards hold, the break may be gone: the function
captures again at that resume point (a recompile, logged under
``EMBER_LOGS=recompiles`` as ``the graph break at file:line, inside a call, may be gone:
guard failed: ...``). The old entry stays valid (running the call for real is always
correct): it is used when the recompile limit leaves no room for a new entry or the new
capture cannot be made, and when the new capture breaks at the same call again its
break check is dropped (the guard that failed does not decide the break) and the break
is not counted again in ``stats.graph_breaks``.
"""

from __future__ import annotations

from ember.frontend.bytecode.breaks import BreakInfo
from ember.frontend.guards import GuardSet

__all__ = ["InlinedBreaks", "break_location"]


class InlinedBreaks(dict[int, BreakInfo]):
    """Root instruction index -> the break that happened inside the call it made (read
    by the interpreter at every root instruction of a capture). ``attempt``: the guards
    of the capture attempt running now (set by the interpreter of that capture);
    ``deciding``: those of the attempts abandoned at an inlined break."""

    def __init__(self) -> None:
        super().__init__()
        self.attempt: GuardSet | None = None
        self.deciding: list[GuardSet] = []

    def abandoned(self, ip: int, info: BreakInfo) -> None:
        """The attempt running now stopped at a break inside the call at root
        instruction ``ip``: the next attempt runs that call for real."""
        self[ip] = info
        if self.attempt is not None and all(g is not self.attempt for g in self.deciding):
            self.deciding.append(self.attempt)
        self.attempt = None

    def break_guards(self, kept: GuardSet) -> GuardSet | None:
        """The guards of the abandoned attempts that ``kept`` (the final capture's) does
        not hold, or None; the attempts are forgotten (their guard sets hold values of
        the first call)."""
        deciding, self.deciding, self.attempt = self.deciding, [], None
        if not deciding:
            return None
        merged = GuardSet()
        for g in kept.guards:
            merged.add(g)
        known = len(merged)
        for guards in deciding:
            for g in guards.guards:
                merged.add(g)
        extra = merged.guards[known:]
        return GuardSet(list(extra)) if extra else None


def break_location(info: BreakInfo | None) -> str:
    """Where a segment's break is, for logs: ``file:line`` of the user's line."""
    where = info.location if info is not None else None
    return "<unknown location>" if where is None else f"{where.file}:{where.line}"
