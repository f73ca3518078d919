"""The strict compiled function's use of the capture cache
(:mod:`ember.frontend.capture_cache`): the first call's segment from an earlier
process's capture, and storing a whole call's capture. A mixin of
:class:`~.strict.StrictFunction`.

NOTE: nothing here imports the capture machinery: a call answered by the capture cache
runs without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ember.frontend.bytecode.frame import FrameState
from ember.frontend.bytecode.segment_run import FunctionContext, Segment
from ember.frontend.capture_modes import CompileRequest
from ember.frontend.stats import CompileStats, add_report_counts
from ember.runtime.logs import log

if TYPE_CHECKING:
    from ember.frontend.bytecode.breaks import BreakInfo
    from ember.frontend.capture_cache import CaptureCache

__all__ = ["CaptureCacheUse"]


class CaptureCacheUse:
    """The capture-cache methods of :class:`~.strict.StrictFunction`."""

    request: CompileRequest
    # NOTE: not `fn: types.FunctionType`, which mypy reads as a method (bound on access)
    fn: Any
    stats: CompileStats
    _ctx: FunctionContext
    _capture_cache: CaptureCache | None
    _break_calls: dict[int, dict[int, BreakInfo]]
    _callees: dict[Any, Any]

    def _name(self) -> str:
        return str(self.fn.__qualname__)

    def _capture_cache_of(self) -> CaptureCache | None:
        from ember.frontend.capture_cache import CaptureCache, capture_cache_enabled

        if not capture_cache_enabled() or self.request.backend not in ("aot_eager",
                                                                       "inductor"):
            return None
        if self._capture_cache is None:
            self._capture_cache = CaptureCache(self.request, self.fn, self._name())
        return self._capture_cache

    def _from_capture_cache(self, state: FrameState) -> tuple[Segment, list[Any]] | None:
        """The first call's segment from the capture cache (no capture), or None."""
        cache = self._capture_cache_of()
        if cache is None:
            return None
        found = cache.lookup(state, self._ctx, self._load_compiled)
        if found is None:
            return None
        self.stats.cache_hits += 1
        self.stats.capture_cache_hits += 1
        self.stats.graphs += 1
        return found

    def _load_compiled(self, digest: str) -> Callable[[list[Any]], list[Any]] | None:
        """The compiled program of program-cache entry ``digest``, ready to run (CUDA
        graphs when the mode asks for them), or None."""
        from ember.runtime.cache.program_cache import load_entry
        from ember.runtime.callable import ProgramCallable
        from ember.runtime.ir import IRError
        from ember.runtime.ir.effects import check_may_run
        from ember.runtime.pipeline import mode_features

        compiled = load_entry(digest)
        if compiled is None:
            return None
        check_may_run(compiled)
        try:
            runner = ProgramCallable(compiled)
        except IRError as e:
            log("cache", f"program cache entry {digest[:16]} does not load ({e})")
            return None
        if "cudagraphs" in mode_features(self.request.mode):
            runner.enable_cuda_graphs()
        add_report_counts(self.stats, compiled)
        return runner

    def _store_capture(self, seg: Segment) -> None:
        """Store a whole call's capture (no graph break anywhere) in the capture cache."""
        cache = self._capture_cache_of()
        if cache is None:
            return
        if self._break_calls.get(0) or self._callees:
            log("cache", f"capture of {self._name()} not stored in the capture cache: "
                         "the call has a graph break in an inlined call")
            return
        from ember.runtime.cache.program_cache import entry_digest

        digest = entry_digest(seg.program) if seg.program is not None else None
        cache.store(seg, digest)
