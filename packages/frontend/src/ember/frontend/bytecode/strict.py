"""The strict capture mode's compiled function: segments, guards, breaks, recompiles.

A call runs as a chain of segments (:mod:`.segment`). At each resume point (the
function's start, or the instruction after a graph break) the cached segments for that
point are tried, newest last; the first whose guards hold runs its graph and rebuilds the
frame. At a break the breaking instruction then runs for real (concrete interpreter; a
call of user code goes through that callee's own compiled wrapper), and the next resume
point is looked up — or captured on first use. When a resume point has
``config.recompile_limit`` entries and none matches, the rest of the call runs eagerly
(the whole function at its start; the concrete interpreter after a break), counted in
``stats.recompile_limit_fallbacks``; the first time, ONE
:class:`~ember.frontend.compiled.RecompileLimitWarning` per compiled function names the
failing guard and the user source line whose capture installed it, and
``EMBER_LOGS=recompiles`` logs every recompile and fallback with the same. An exception
the frame does not handle makes an eager entry (``Segment.eager``, guarded by the
capture up to the exception): the call runs from that resume point in the concrete
interpreter, its callees compiled on their own.

Callees run for real at a break are compiled once per function, not per object: the
layers of a model (guarded by type, their parameters graph inputs) share compiled
segments, and a loop resumed after a break in its body is guarded on how many items its
iterator has left, not its position (:class:`~.iteration.ResumedIterator`). So the
number of compiles of ``for layer in self.layers: x = layer(x)`` does not grow with the
number of layers. Values that depend on the position (an ``enumerate`` index) are
guarded by value until they change: automatic dynamic (:mod:`ember.frontend.dynamic`)
then makes the changed sizes, and ints (:mod:`.symbolic_ints`), symbolic.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import inspect
import linecache
import types
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from ember.frontend.bytecode.argument_layouts import unsupported_layout
from ember.frontend.bytecode.escape import break_allowed
from ember.frontend.bytecode.frame import Frame, FrameState
from ember.frontend.bytecode.recipes import EagerState, Unrebuildable
from ember.frontend.bytecode.root_hooks import (call_with_forward_hooks, custom_module_call,
                                                has_hooks, needs_module_call, replaced_forward)
from ember.frontend.bytecode.segment_run import FunctionContext, Segment
from ember.frontend.bytecode.sharing_recapture import run_shared_otherwise
from ember.frontend.bytecode.strict_cache import CaptureCacheUse
from ember.frontend.capture_modes import CompileRequest
from ember.frontend.bytecode.wrapped_callables import as_python_function
from ember.frontend.dynamic import DynamicPolicy
from ember.frontend.stats import CompileStats, add_report_counts
from ember.frontend.torch_substitutes import substitute_for
from ember.runtime.callable import InputAliasingError
from ember.runtime.config import config
from ember.runtime.ir import Program, SourceLocation
from ember.runtime.ir.gc_pause import collector_paused
from ember.runtime.logs import log, log_enabled
from ember.runtime.phases import timed
from torch import nn

if TYPE_CHECKING:
    from ember.frontend.bytecode.breaks import BreakInfo
    from ember.frontend.capture_cache import CaptureCache

# NOTE: the capture machinery (interpreter, recorder, fake tensors: .segment, .calls,
# .interpreter, .support; .breaks, .inlined_breaks, .binding) is imported where a capture
# or a graph break needs it, not here: a call answered by the capture cache
# (ember.frontend.capture_cache) runs without it (tests/test_warm_imports.py).

_EAGER = object()


class StrictFunction(CaptureCacheUse):
    """``ember.frontend.compile`` in strict mode (``options={"capture": "strict"}``).

    ``stats`` counts ``compiles`` (segments captured), ``recompiles`` (captures caused
    by a guard failure), ``cache_hits``, ``graphs`` (captured segments with ops),
    ``graph_breaks`` (captured segments that end in a break), ``eager_fallback_calls``
    and ``recompile_limit_fallbacks``. ``breaks`` lists every distinct break captured.
    """

    def __init__(self, request: CompileRequest) -> None:
        self.request = request
        target = request.fn
        self._bound: tuple[Any, ...] = ()
        self._bound_kw: dict[str, Any] = {}
        # a module class's own __call__ is what calling it runs (as torch.compile compiles)
        call = custom_module_call(target) if isinstance(target, nn.Module) else None
        self._custom_call = call is not None
        if isinstance(target, nn.Module):
            forward = types.MethodType(call, target) if call else target.forward
            while isinstance(forward, StrictFunction):  # m.forward = compile(m.forward)
                forward = forward.request.fn
            self._bound = (target,) if isinstance(forward, types.MethodType) else ()
            target = forward.__func__ if isinstance(forward, types.MethodType) else forward
        while isinstance(target, StrictFunction):  # compiled again: its function's
            target = target.request.fn
        if isinstance(target, functools.partial):  # accelerate's hooked forward, ...
            self._bound, self._bound_kw = target.args, dict(target.keywords)
            target = target.func
        if isinstance(target, types.MethodType):
            self._bound = (target.__self__, *self._bound)
            target = target.__func__
        target = as_python_function(target)  # a builtin: a function calling it
        self.fn: types.FunctionType = substitute_for(target)  # (torch_substitutes)
        functools.update_wrapper(self, target)
        self._per_instance: weakref.WeakKeyDictionary[Any, StrictFunction] = (
            weakref.WeakKeyDictionary())
        self.stats = CompileStats()
        self.breaks: list[BreakInfo] = []
        self.segments: dict[int, list[Segment]] = {}
        self._break_calls: dict[int, dict[int, BreakInfo]] = {}
        self._warned = False
        self._eager_points: set[int] = set()
        # None: not checked yet (before the first capture, _check_supported)
        self._eager_reason: str | None = None
        self._supported_checked = False
        if self.fn.__code__.co_flags & inspect.CO_GENERATOR:
            self._eager_reason = "generator functions run eagerly when compiled directly"
        self._callees: dict[types.FunctionType, StrictFunction] = {}
        self._is_callee = False  # called from code run eagerly (segment: empty_runs_eagerly)
        self._forwards: dict[Any, StrictFunction] = {}  # forward replaced: _replaced
        self._capture_cache: CaptureCache | None = None
        self._policy = DynamicPolicy(request.dynamic, ints=True, layouts=True)
        # an input was marked dynamic, or an op has a data-dependent size: every later
        # capture of this function records with symbolic shapes
        self._saw_marks = False
        self._last_hit: dict[int, int] = {}  # resume point -> entry that matched last
        code = self.fn.__code__
        only_positional = not code.co_kwonlyargcount and not (
            code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS))
        # calls with exactly this many positional arguments need no binding
        self._plain_arity = code.co_argcount if only_positional else -1
        b = self.fn.__globals__.get("__builtins__", builtins.__dict__)
        self._ctx = FunctionContext(self.fn.__code__, self.fn.__globals__,
                                    b if isinstance(b, dict) else b.__dict__,
                                    self.fn.__closure__ or ())

    # ---- public ------------------------------------------------------------------------

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        """A compiled function used as a method (``@compile`` on ``forward``): one
        compiled function per instance, bound to it."""
        if obj is None:
            return self
        bound = self._per_instance.get(obj)
        if bound is None:
            request = CompileRequest(types.MethodType(self.fn, obj),
                                     obj if isinstance(obj, nn.Module) else None,
                                     self.request.backend, self.request.mode,
                                     self.request.fullgraph, self.request.dynamic,
                                     dict(self.request.options))
            bound = StrictFunction(request)
            self._per_instance[obj] = bound
        return bound

    def reset(self) -> None:
        """Drop every captured segment and zero the stats."""
        self.stats = CompileStats()
        self.breaks = []
        self.segments = {}
        self._break_calls = {}
        self._warned = False
        self._eager_points = set()
        self._callees = {}
        self._forwards = {}
        self._policy = DynamicPolicy(self.request.dynamic, ints=True, layouts=True)
        self._saw_marks = False
        self._last_hit = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        root = self.request.fn
        if self._custom_call:  # (it runs the hooks itself, through super().__call__)
            return self._call(*args, **kwargs)
        if isinstance(root, nn.Module):
            replaced = replaced_forward(root, self.fn)  # m.forward = ... after compiling
            if replaced is not None:
                return self._replaced(root, replaced, args, kwargs)
        if isinstance(root, nn.Module) and has_hooks(root):  # bytecode/root_hooks.py
            if needs_module_call(root):
                self._note_whole_function_eager(
                    "the compiled module has backward hooks (or global module hooks "
                    "are registered), which only nn.Module.__call__ runs; each call runs "
                    "eagerly")
                self.stats.eager_fallback_calls += 1
                return root(*args, **kwargs)
            return call_with_forward_hooks(root, self._call, args, kwargs)
        return self._call(*args, **kwargs)

    def _replaced(self, root: nn.Module, forward: Any, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> Any:
        """A call of the module after its ``forward`` was replaced: that function is
        compiled in its turn (one compiled function each, sharing these stats); a
        callable that is not a Python function runs eagerly (counted)."""
        compiled = self._forwards.get(forward)
        if compiled is None:
            try:
                compiled = StrictFunction(dataclasses.replace(self.request, fn=forward))
            except TypeError:
                self._note_whole_function_eager(f"forward replaced by a "
                                                f"{type(forward).__name__} after compiling")
                self.stats.eager_fallback_calls += 1
                return root(*args, **kwargs)
            compiled.stats = self.stats
            self._forwards[forward] = compiled
        if has_hooks(root):
            if needs_module_call(root):
                self.stats.eager_fallback_calls += 1
                return root(*args, **kwargs)
            return call_with_forward_hooks(root, compiled._call, args, kwargs)
        return compiled._call(*args, **kwargs)

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        args = self._bound + args
        kwargs = {**self._bound_kw, **kwargs} if self._bound_kw else kwargs
        if self._eager_reason is not None:
            self._note_whole_function_eager(self._eager_reason)
            self.stats.eager_fallback_calls += 1
            return self.fn(*args, **kwargs)
        layout = unsupported_layout(args, kwargs)
        if layout == "fake":  # called by a capture tracing its caller: runs inline there
            return self.fn(*args, **kwargs)
        if layout is not None:  # before the lookup: a guard would not tell it apart
            self._note_whole_function_eager(
                f"an argument is a tensor of layout {layout} (Ember's graphs hold strided "
                "tensors; each such call runs eagerly)")
            self.stats.eager_fallback_calls += 1
            return self.fn(*args, **kwargs)
        state = self._entry_state(args, kwargs)
        if state is None:
            return self.fn(*args, **kwargs)  # raises CPython's TypeError
        while True:
            found = self._lookup(state)
            if found is _EAGER:
                self.stats.eager_fallback_calls += 1
                if state.ip == 0:
                    return self.fn(*args, **kwargs)
                return self._run_concrete(state)
            assert isinstance(found, tuple)
            segment, inputs = found
            if segment.eager:  # an exception the frame does not handle (.exception_ops)
                self.stats.eager_fallback_calls += 1
                return self._run_concrete(state)
            try:
                done, value = segment.execute(state, self._ctx, inputs)
            except InputAliasingError as e:  # NOTE: raised before the graph runs
                done, value = run_shared_otherwise(self, state, segment, e)
            if done:
                return value
            state = self._step_for_real(value)

    @property
    def graphs(self) -> list[Program]:
        """The captured graphs: this function's (in capture order), then those of the
        callees it ran for real at graph breaks (their graphs count in ``stats`` too)."""
        out: list[Program] = []
        for entries in self.segments.values():
            out.extend(s.program for s in entries if s.program is not None)
        for callee in self._callees.values():
            out.extend(callee.graphs)
        return out

    @property
    def __ember_original__(self) -> Any:
        """What was compiled: a capture calling this compiled function captures it."""
        return self.request.fn

    def guard_text(self) -> str:
        """The guards of every captured segment, callees' segments after this one's."""
        parts = []
        for ip, entries in sorted(self.segments.items()):
            for i, s in enumerate(entries):
                kind = " (runs eagerly)" if s.eager else ""
                parts.append(f"resume point {ip}, entry {i}{kind}:\n{s.guards.describe()}")
                if s.break_guards is not None:  # (.inlined_breaks)
                    from ember.frontend.bytecode.inlined_breaks import break_location
                    parts.append(f"  break check (the break at {break_location(s.break_info)}"
                                 " may be gone when one fails: captured again):\n"
                                 f"{s.break_guards.describe()}")
        for callee in self._callees.values():
            text = callee.guard_text()
            if text:
                parts.append(f"callee {callee._name()}:\n{text}")
        return "\n".join(parts)

    # ---- driving ---------------------------------------------------------------------

    def _entry_state(self, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> FrameState | None:
        """The frame state at the start of a call; None when the arguments do not bind
        (then the caller lets Python make the call and raise its TypeError)."""
        code = self.fn.__code__
        if not kwargs and len(args) == self._plain_arity:
            # the common call: every parameter passed positionally, nothing to bind
            local_values = dict(zip(code.co_varnames, args))
        else:
            from ember.frontend.bytecode.binding import BindError, bind_arguments
            try:
                local_values = bind_arguments(self.fn, args, kwargs).values
            except BindError:
                return None
        cells = dict(zip(code.co_freevars, self.fn.__closure__ or ()))
        return FrameState(0, [], local_values, cells, torch.is_grad_enabled())

    def _lookup(self, state: FrameState) -> tuple[Segment, list[Any]] | object:
        """The segment whose guards hold for ``state`` (capturing a new one on a miss)
        with its graph inputs, or ``_EAGER``."""
        entries = self.segments.setdefault(state.ip, [])
        # NOTE: the entry that matched last is tried first: a decode loop hits its dynamic
        # entry every call and must not pay for the prefill's and first step's guards
        # (any entry whose guards hold is valid; the list keeps its creation order, which
        # automatic dynamic shapes reads)
        last = self._last_hit.get(state.ip, 0)
        order = range(len(entries)) if last == 0 else (
            last, *(i for i in range(len(entries)) if i != last))
        room = len(entries) < config.recompile_limit
        # an entry ending at a call whose inlined break may be gone (.inlined_breaks):
        # captured again, kept for when no new entry can replace it
        gone: tuple[int, Segment, list[Any]] | None = None
        for i in order:
            seg = entries[i]
            inputs = seg.match(state, self._ctx)
            if inputs is not None:
                if room and seg.break_may_be_gone(state, self._ctx):
                    gone = gone or (i, seg, inputs)
                    continue
                return self._hit(state.ip, i, seg, inputs)
        if not entries and state.ip == 0:  # NOTE: the first call only, never the steady state
            cached = self._from_capture_cache(state)
            if cached is not None:
                entries.append(cached[0])
                return cached
        if gone is not None:
            from ember.frontend.bytecode.inlined_breaks import break_location
            old = gone[1]
            self.stats.recompiles += 1
            log("recompiles", lambda: f"recompiling {self._name()} at resume point "
                f"{state.ip} (entry {len(entries) + 1} of at most "
                f"{config.recompile_limit}): the graph break at "
                f"{break_location(old.break_info)}, inside a call, may be gone: guard failed: "
                f"{old.break_guards.failure_text(state, self._ctx) if old.break_guards else ''}")
        elif entries:
            # NOTE: named only when shown: re-checking guards one by one is slow, and a
            # call past the limit must not pay for it unless it is logged
            def failed_guard() -> str:
                return entries[-1].guards.failure_text(state, self._ctx)

            if not room:
                self.stats.recompile_limit_fallbacks += 1
                self._warn_limit(state.ip, failed_guard)
                return _EAGER
            self.stats.recompiles += 1
            self._policy.note_misses((e.guards.failures(state, self._ctx)
                                      for e in reversed(entries)), self._name())
            log("recompiles", lambda: f"recompiling {self._name()} at resume point "
                f"{state.ip} (entry {len(entries) + 1} of at most "
                f"{config.recompile_limit}): guard failed: {failed_guard()}")
        if state.ip in self._eager_points:
            return _EAGER if gone is None else self._hit(state.ip, *gone)
        try:
            with collector_paused():  # a cold compile's garbage collections
                captured = timed("capture")(self._supported_capture)(
                    state, gone[1].break_info if gone else None)  # stage profile
        except Unrebuildable as e:
            if gone is not None:  # its call runs for real, as before: keep it, stop asking
                gone[1].break_guards = None
                return self._hit(state.ip, *gone)
            reason = (str(e) if isinstance(e, EagerState)
                      else f"cannot rebuild the state at a graph break: {e}")
            if state.ip == 0:
                self._eager_reason = reason
            self._eager_points.add(state.ip)
            self._note_whole_function_eager(reason)
            return _EAGER
        if captured is None:
            return _EAGER if gone is None else self._hit(state.ip, *gone)
        if gone is not None and captured.break_ip == gone[1].break_ip:
            gone[1].break_guards = None  # the break came back: what failed does not decide it
        entries.append(captured)
        if state.ip == 0 and not captured.eager:
            self._store_capture(captured)
        return captured, [s.fetch(state, self._ctx) for s in captured.input_sources]

    def _hit(self, ip: int, i: int, seg: Segment, inputs: list[Any]) -> tuple[Segment, list[Any]]:
        self.stats.cache_hits += 1
        self._last_hit[ip] = i
        return seg, inputs

    def _check_supported(self) -> bool:
        """Whether the interpreter can run the function's code at all (checked once,
        before its first capture); when not, every call runs eagerly."""
        if not self._supported_checked:
            from ember.frontend.bytecode.interpreter import Interpreter
            from ember.frontend.bytecode.support import unsupported_reason

            self._supported_checked = True
            reason = unsupported_reason(self.fn.__code__, Interpreter)
            if reason is not None and self._eager_reason is None:
                self._eager_reason = reason
        if self._eager_reason is not None:
            self._note_whole_function_eager(self._eager_reason)
            return False
        return True

    def _supported_capture(self, state: FrameState,
                           known: BreakInfo | None = None) -> Segment | None:
        """:meth:`_capture`, or None when the function's code cannot be interpreted (the
        first check imports the interpreter: part of the capture's time)."""
        if not self._check_supported():
            return None
        return self._capture(state, known)

    def _capture(self, state: FrameState, known: BreakInfo | None = None) -> Segment:
        """Capture a segment from ``state``; a break equal to ``known`` (that of the entry
        whose break check failed, come back) is not counted again."""
        from ember.frontend.bytecode.inlined_breaks import InlinedBreaks
        from ember.frontend.bytecode.segment import (
            InlinedBreak,
            NeedsSymbolicShapes,
            capture_segment,
        )
        from ember.frontend.bytecode.triton_launch import launches_refused
        from ember.frontend.declined_sizes import SymbolicProgramDeclined, static_from_now_on
        from ember.runtime.saved_hooks import hooks_kept_out

        # NOTE: a new capture finds its inlined breaks again: those of an earlier entry
        # may be gone (a model that changed itself at its first call)
        calls = self._break_calls[state.ip] = InlinedBreaks()
        while True:
            symbolic = self._policy.may_be_dynamic or self._saw_marks
            try:
                # (the caller's saved-tensor hooks stay out of the recording:
                # ember.runtime.saved_hooks)
                with launches_refused(), hooks_kept_out():
                    seg = capture_segment(state, self._ctx, calls, self._compile_graph,
                                          self._policy, symbolic,
                                          self._is_callee and state.ip == 0)
                break
            except InlinedBreak as e:
                self._check_fullgraph(e.info)
                calls.abandoned(e.ip, e.info)
            except SymbolicProgramDeclined as e:  # (declined_sizes): static from now on
                static_from_now_on(self._policy, e, self._name())
            except NeedsSymbolicShapes:
                if symbolic:
                    raise AssertionError("a symbolic capture asked for symbolic shapes"
                                         ) from None
                self._saw_marks = True
        last = next(reversed(self.segments.get(state.ip, [])), None)  # a new break:
        if seg.break_info is not None and (last is None or last.break_info is None or (
                last.break_ip, last.eager) != (seg.break_ip, seg.eager)) and (
                self._policy.refuse_symbolic_ints(seg.break_info.reason, self._name())):
            return self._capture(state, known)
        seg.break_guards = calls.break_guards(seg.guards)
        if seg.eager:  # (.breaks.UnhandledException): its guards decide, not a break's
            seg.break_guards = None
            info = seg.break_info
            if state.ip != 0 and info is not None:
                seg.break_info = dataclasses.replace(info, reason=info.reason.replace(
                    "the frame runs eagerly", "the rest of the frame (from a graph "
                    "break's resume point) runs eagerly", 1))
        self.stats.compiles += 1
        if seg.program is not None:
            self.stats.graphs += 1
            log("graphs", lambda: f"{self._name()} graph {self.stats.graphs} "
                f"({seg.op_count} ops):\n{_program_text(seg.program)}")  # type: ignore[arg-type]
        if seg.break_info is not None and seg.break_info != known:
            self._check_fullgraph(seg.break_info)
            self.stats.graph_breaks += 1
            self.breaks.append(seg.break_info)
            log("graph_breaks", lambda: f"graph break in {self._name()}: "
                f"{seg.break_info.describe() if seg.break_info else ''}")
        if log_enabled("guards"):
            log("guards", f"guards of {self._name()} at resume point {state.ip}:\n"
                f"{seg.guards.describe()}")
        return seg

    def _check_fullgraph(self, info: BreakInfo) -> None:
        from ember.frontend.bytecode.breaks import FullGraphError
        if self.request.fullgraph and not break_allowed(
                info.reason, tuple(self.request.options.get("allow_breaks", ()))):
            raise FullGraphError(info)

    def _compile_graph(self, program: Program) -> Callable[[list[Any]], list[Any]]:
        # NOTE: through the frontend's compiled module, so one patch point serves both
        # capture modes (the stats tests patch it there).
        from ember.frontend import compiled as compiled_module
        from ember.frontend.declined_sizes import compile_for_policy

        compile_program = compiled_module.compile_program  # type: ignore[attr-defined]
        opts = {k: v for k, v in self.request.options.items() if k != "allow_breaks"}
        compiled = compile_for_policy(compile_program, program, self.request.backend, opts,
                                      self.request.mode, self._policy)
        add_report_counts(self.stats, getattr(compiled, "program", None))
        return compiled

    def _step_for_real(self, state: FrameState) -> FrameState:
        """Run the instruction at ``state.ip`` with real values."""
        from ember.frontend.bytecode.calls import CallHandler
        from ember.frontend.bytecode.interpreter import Interpreter

        frame = self._frame_from(state)
        interp = Interpreter(None, CallHandler(compile_callee=self._callee))
        torch.set_grad_enabled(state.grad_enabled)  # kept as the instruction leaves it:
        interp.step(frame)  # (a `with torch.inference_mode()` entered here turns it off)
        if frame.returned:
            raise AssertionError("a graph break never happens at a return")
        return frame.snapshot(torch.is_grad_enabled())

    def _run_concrete(self, state: FrameState) -> Any:
        from ember.frontend.bytecode.calls import CallHandler
        from ember.frontend.bytecode.interpreter import Interpreter

        frame = self._frame_from(state)
        interp = Interpreter(None, CallHandler(compile_callee=self._callee))
        return interp.run_frame(frame)

    def _frame_from(self, state: FrameState) -> Frame:
        frame = Frame(self._ctx.code, self._ctx.f_globals, self._ctx.f_builtins,
                      dict(state.locals), closure=self._ctx.closure)
        frame.stack = list(state.stack)
        frame.cells = dict(state.cells)
        frame.exc_stack = list(state.exc_stack)
        frame.ip = state.ip
        # NOTE: KW_NAMES (3.11/3.12) ran before the break; the frame state does not
        # carry it, so a CALL resumed here recovers it from the instructions before.
        instrs = frame.instructions
        i = state.ip - 1
        while i >= 0 and instrs[i].opname == "PRECALL":
            i -= 1
        if i >= 0 and instrs[i].opname == "KW_NAMES" and instrs[state.ip].opname == "CALL":
            frame.kw_names = tuple(self._ctx.code.co_consts[instrs[i].arg or 0])
        return frame

    def _callee(self, fn: types.FunctionType, owner: Any) -> Callable[..., Any]:
        """The compiled wrapper of a user function called at a graph break: one per
        function, shared by every object it is bound to (``owner``, passed as its first
        argument). The layers of a model, guarded by type and with their parameters as
        graph inputs, reuse one another's compiled segments."""
        compiled = self._callees.get(fn)
        if compiled is None:
            request = CompileRequest(fn, None, self.request.backend, self.request.mode,
                                     False, self.request.dynamic, dict(self.request.options))
            compiled = StrictFunction(request)
            # NOTE: a callee's graphs, breaks and compiles count as this function's.
            compiled.stats = self.stats
            compiled.breaks = self.breaks
            compiled._is_callee = True
            self._callees[fn] = compiled
        if owner is None:
            return compiled
        return functools.partial(compiled, owner)

    def _warn_limit(self, ip: int, failed_guard: Callable[[], str]) -> None:
        """Every fallback is logged (``EMBER_LOGS=recompiles``); the first one per
        compiled function also warns."""
        from ember.frontend.compiled import RecompileLimitWarning

        if self._warned and not log_enabled("recompiles"):
            return
        message = (f"ember: {self._name()} reached the recompile limit "
                   f"({config.recompile_limit} entries at resume point {ip}); the rest of "
                   f"this call runs eagerly, and so will every call that misses the cache "
                   f"there (stats.recompile_limit_fallbacks). The guard that kept "
                   f"failing: {failed_guard()}. Raise EMBER_RECOMPILE_LIMIT to compile more "
                   f"variants.")
        log("recompiles", message)
        if self._warned:
            return
        self._warned = True
        warnings.warn(message, RecompileLimitWarning, stacklevel=3)

    def _note_whole_function_eager(self, reason: str) -> None:
        code = self.fn.__code__  # the def line: the reason is about the whole function
        line = code.co_firstlineno
        where = SourceLocation(code.co_filename, line, code.co_name,
                               linecache.getline(code.co_filename, line).strip())
        from ember.frontend.bytecode.breaks import BreakInfo
        info = BreakInfo(f"{self._name()} runs eagerly: {reason}", where)
        if info not in self.breaks:
            self._check_fullgraph(info)
            self.breaks.append(info)
            self.stats.graph_breaks += 1
            log("graph_breaks", info.describe())

    def _name(self) -> str:
        return self.fn.__qualname__


def _program_text(program: Program) -> str:
    from ember.runtime.ir import print_program  # NOTE: only where graphs are logged

    return print_program(program)
