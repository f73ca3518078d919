"""Graph breaks: why capture stopped, where, and what the user can do about it."""

from __future__ import annotations

from dataclasses import dataclass

from ember.runtime.ir import SourceLocation
from ember.runtime.tracing_errors import SymbolicValueError


@dataclass(frozen=True)
class BreakInfo:
    """One graph break: ``reason`` (what Ember could not capture), the user source line
    it happened at, and a ``hint`` for avoiding it."""

    reason: str
    location: SourceLocation | None
    hint: str = ""
    # where in library code (torch, the standard library) the break happened, when
    # ``location`` is the user's line that called into it
    library_location: SourceLocation | None = None

    def describe(self) -> str:
        where = "<unknown location>"
        if self.location is not None:
            where = f"{self.location.file}:{self.location.line} in {self.location.function}"
            if self.location.text:
                where += f"\n    {self.location.text}"
        inner = self.library_location
        if inner is not None:
            where += f"\n  inside {inner.file}:{inner.line} in {inner.function}"
            if inner.text:
                where += f"\n    {inner.text}"
        text = f"{self.reason}\n  at {where}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class GraphBreak(Exception):
    """Raised inside the interpreter at code it cannot capture. ``location`` is filled
    in by the interpreter from the instruction being run."""

    def __init__(self, reason: str, hint: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint
        self.location: SourceLocation | None = None
        self.library_location: SourceLocation | None = None  # BreakInfo.library_location
        # True once the break escaped an inlined call (the caller must restart capture
        # and run that call as a whole).
        self.from_inlined_call = False
        # set when the break happened while resuming a generator inlined during this
        # capture: the root instruction that created it, which then runs for real
        self.root_ip: int | None = None
        # a torch call failed for sizes that dynamic=True or automatic dynamic made
        # symbolic (declined_sizes.symbolic_failure): capture again with static sizes
        self.symbolic_sizes = False

    def info(self) -> BreakInfo:
        return BreakInfo(self.reason, self.location, self.hint, self.library_location)


class UnhandledException(GraphBreak):
    """An exception of the program reached the root frame of the capture and no handler
    of that frame catches it (raised by a wrong input, or by a path that only capture
    takes: ``if not torch.compiler.is_compiling(): mask = ...``). The frame is not split
    there: the call runs eagerly as a whole (its callees compiled on their own), as
    torch.compile skips such a frame; the segment is an eager entry guarded by what the
    capture read up to the exception (:attr:`~.segment_run.Segment.eager`)."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(f"the frame runs eagerly: {type(exc).__name__} raised during "
                         f"capture and not handled in the compiled function: {exc}",
                         "each call whose guards match runs the function as Python "
                         "(the functions it calls are compiled on their own); a call "
                         "taking another path is captured")


class FullGraphError(RuntimeError):
    """``fullgraph=True`` and the function has a graph break; the message names the
    reason, the user's file, line and source text, and a hint."""

    def __init__(self, info: BreakInfo) -> None:
        super().__init__("fullgraph=True but Ember cannot capture the whole function: "
                         + info.describe())
        self.info = info


class UnsupportedFunction(Exception):
    """The whole function cannot be interpreted (generator, unknown bytecode, state
    Ember cannot rebuild); it runs eagerly."""


DEFAULT_HINT = ("move this code out of the compiled function, wrap it in "
                "ember.frontend.disable, or allow the break with "
                "ember.frontend.allow_break")


#: a float made from a symbolic size (``n ** -0.5``, ``size / n``) given to an op that
#: has no tensor form for it (arithmetic, clamp, full, fill, masked_fill and where have:
#: the recorder's ``tracing_size_floats``); the IR's symbolic values are integers
SYMBOLIC_FLOAT_HINT = ("a float made from a symbolic size (n ** -0.5, size / n) is an "
                       "argument of an op that takes no tensor in its place: keep that "
                       "dimension static (ember.frontend.mark_static, or dynamic=False), "
                       "compute the float outside, or multiply by it instead")


def failure_hint(error: BaseException) -> str:
    """The hint for a call that failed on fake tensors with ``error``; "" for the
    default one."""
    return SYMBOLIC_FLOAT_HINT if isinstance(error, SymbolicValueError) else ""
