"""A call whose inputs share memory otherwise than the matching entry's program took
them: the guards hold, but the program refuses the call
(:class:`~ember.runtime.callable.InputAliasingError`, raised before its graph runs).

The storage guard (:func:`.object_aliasing.guard_shared_storage`) makes a capture whose
arguments shared memory recompile for unrelated ones. The other way round (captured
apart, called with an input the program writes sharing memory with another) no guard is
kept, since it would check every input of every call of a program that writes inputs
(an optimizer step: hundreds). The refusal is caught instead: another entry that takes
the call runs it, else a new capture (whose guards hold the sharing), else, at the
recompile limit, the rest of the frame runs eagerly (``stats.eager_fallback_calls``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.runtime.callable import InputAliasingError
from ember.runtime.config import config
from ember.runtime.logs import log

if TYPE_CHECKING:
    from ember.frontend.bytecode.frame import FrameState
    from ember.frontend.bytecode.segment_run import Segment
    from ember.frontend.bytecode.strict import StrictFunction

__all__ = ["run_shared_otherwise"]


def run_shared_otherwise(fn: StrictFunction, state: FrameState, failed: Segment,
                         error: InputAliasingError) -> tuple[bool, Any]:
    """Run ``state`` of ``fn``, whose entry ``failed`` refused its inputs' memory sharing
    (module doc); returns what :meth:`Segment.execute` does."""
    entries = fn.segments[state.ip]
    for i, seg in enumerate(entries):
        inputs = None if seg is failed else seg.match(state, fn._ctx)
        if inputs is not None and seg.eager:  # as StrictFunction._call runs such an entry
            fn.stats.eager_fallback_calls += 1
            return True, fn._run_concrete(state)
        if inputs is not None:
            try:
                result = seg.execute(state, fn._ctx, inputs)
            except InputAliasingError:
                continue
            fn._last_hit[state.ip] = i
            return result
    log("recompiles", f"recompiling {fn._name()} at resume point {state.ip}: {error}")
    captured = (fn._supported_capture(state)
                if len(entries) < config.recompile_limit else None)
    if captured is None or captured.eager:
        fn.stats.eager_fallback_calls += 1
        return True, fn._run_concrete(state)
    fn.stats.recompiles += 1
    entries.append(captured)
    fn._last_hit[state.ip] = len(entries) - 1
    return captured.execute(state, fn._ctx,
                            [s.fetch(state, fn._ctx) for s in captured.input_sources])
