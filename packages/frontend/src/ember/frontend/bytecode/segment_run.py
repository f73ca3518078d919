"""A captured segment as it runs: its guards' check, its graph, the rebuild of the frame
state or the return value (the capture that makes one is :mod:`.segment`).

NOTE: nothing here imports the capture machinery (the interpreter, the recorder, fake
tensors): a segment loaded from the capture cache (:mod:`ember.frontend.capture_cache`)
runs without it.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from ember.frontend.autocast import AutocastEnd, run_graph
from ember.frontend.bytecode.assert_messages import SymbolicAssert, name_failed_asserts
from ember.frontend.bytecode.frame import FrameState
from ember.frontend.bytecode.guards import GuardSet
from ember.frontend.bytecode.recipes import (
    Fetch,
    Rebuild,
    Recipe,
    Replay,
    fetches_in,
    prefetch,
)
from ember.frontend.bytecode.sources import Source
from ember.frontend.inference_outputs import as_inference
from ember.runtime.ir import Program
from ember.runtime.ir.symbolic import ShapeError

if TYPE_CHECKING:
    from ember.frontend.bytecode.breaks import BreakInfo

__all__ = ["CaptureFacts", "FunctionContext", "Segment"]


@dataclass
class FunctionContext:
    """What every segment of one function shares: its code, globals and closure."""

    code: types.CodeType
    f_globals: dict[str, Any]
    f_builtins: dict[str, Any]
    closure: tuple[Any, ...]


@dataclass(frozen=True)
class CaptureFacts:
    """What the capture cache needs to know of a capture besides its guards: every
    function it inlined, and the globals of inlined functions it read without a source
    (``(module name, global name, value)``)."""

    inlined: tuple[types.FunctionType, ...] = ()
    untracked_globals: tuple[tuple[str, str, Any], ...] = ()


@dataclass
class Segment:
    """One captured segment (see the module docstring)."""

    start_ip: int
    guards: GuardSet
    input_sources: list[Source]
    program: Program | None
    runner: Callable[[list[Any]], list[Any]] | None
    replays: list[Replay]
    grad_at_end: bool
    graph_grad: bool  # the grad mode the graph runs under (see .grad_mode)
    # the graph outputs made as inference tensors (ember.frontend.inference_outputs)
    inference_outputs: tuple[int, ...] = ()
    # the asserts recorded as checks of data-dependent sizes (.assert_messages)
    asserts: tuple[SymbolicAssert, ...] = ()
    # the autocast state the code left, when not the one at the start (.autocast_blocks)
    autocast_end: AutocastEnd | None = None
    returns: Recipe | None = None
    stack: list[Recipe] = field(default_factory=list)
    locals: dict[str, Recipe] = field(default_factory=dict)
    cells: dict[str, Recipe] = field(default_factory=dict)
    exc_stack: list[Recipe] = field(default_factory=list)
    break_ip: int = -1
    break_info: BreakInfo | None = None
    facts: CaptureFacts | None = None
    # ending at a call that runs for real because of a break inside it: the guards of
    # the abandoned captures that found that break (.inlined_breaks)
    break_guards: GuardSet | None = None
    # an eager entry: an exception no handler of the frame catches was raised in the
    # capture (.breaks.UnhandledException); a call whose guards hold runs the frame as
    # Python from ``start_ip`` (StrictFunction._run_eagerly), nothing else is set
    eager: bool = False
    _matcher: Callable[[Any, Any], list[Any] | None] | None = None
    _break_matcher: Callable[[Any, Any], list[Any] | None] | None = None
    _fetches: list[Fetch] | None = None

    def match(self, state: FrameState, ctx: FunctionContext) -> list[Any] | None:
        """The graph inputs fetched from ``state``, or None when a guard fails."""
        if self._matcher is None:
            self._matcher = self.guards.matcher(self.input_sources,
                                                f"the segment at resume point {self.start_ip}")
        return self._matcher(state, ctx)

    def break_may_be_gone(self, state: FrameState, ctx: FunctionContext) -> bool:
        """Whether a guard of :attr:`break_guards` fails on ``state`` (whose own guards
        hold): the call this segment ends at might now be captured whole."""
        if self.break_guards is None:
            return False
        if self._break_matcher is None:
            self._break_matcher = self.break_guards.matcher(
                (), f"the break check of the segment at resume point {self.start_ip}")
        return self._break_matcher(state, ctx) is None

    @property
    def op_count(self) -> int:
        return 0 if self.program is None else len(self.program.forward.calls())

    def execute(
        self, state: FrameState, ctx: FunctionContext, inputs: list[Any]
    ) -> tuple[bool, Any]:
        """Run the graph on ``inputs`` (from :meth:`match`) and rebuild: ``(True, return
        value)`` or ``(False, state at the break instruction)``."""
        outs: list[Any] = []
        if self.runner is not None:
            try:
                # NOTE: autocast off: the graph holds its casts (ember/frontend/autocast.py)
                if self.graph_grad == torch.is_grad_enabled():
                    outs = run_graph(self.runner, inputs)
                else:  # an enable_grad block under no_grad made values that require grad
                    with torch.set_grad_enabled(self.graph_grad):
                        outs = run_graph(self.runner, inputs)
            except ShapeError as e:  # a failed assert over data-dependent sizes?
                name_failed_asserts(e, self.asserts)
                raise
            if self.inference_outputs:  # made in a `with torch.inference_mode()` block
                outs = as_inference(list(outs), self.inference_outputs)
        rt = Rebuild(list(outs), state, ctx)
        if self.replays:  # start-state reads first: the replays may change them
            if self._fetches is None:
                self._fetches = fetches_in([self.replays, self.returns, self.stack,
                                            self.locals, self.cells, self.exc_stack])
            prefetch(self._fetches, rt)
        for r in self.replays:
            r.apply(rt)
        if torch.is_grad_enabled() != self.grad_at_end:
            # NOTE: only on a change: set_grad_enabled builds a context-manager object
            torch.set_grad_enabled(self.grad_at_end)
        if self.autocast_end is not None:  # a `with torch.autocast` block open at a break
            self.autocast_end.apply()
        if self.returns is not None:
            return True, self.returns.build(rt)
        new = FrameState(
            self.break_ip,
            [r.build(rt) for r in self.stack],
            {k: r.build(rt) for k, r in self.locals.items()},
            {k: r.build(rt) for k, r in self.cells.items()},
            self.grad_at_end,
            [r.build(rt) for r in self.exc_stack],
        )
        return False, new
