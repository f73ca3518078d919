"""Capturing one segment: from a resume point of the function to its return or to the
next graph break.

A function with graph breaks runs as a chain of segments. Each segment starts from a
real :class:`~.frame.FrameState` (the function's arguments, or the state after a break
instruction ran for real), interprets symbolically until ``RETURN`` or a
:class:`~.breaks.GraphBreak`, and produces a :class:`Segment`: guards, the graph (a
compiled Program), the graph's inputs (sources), side-effect replays and recipes that
rebuild the frame state (or the return value) from the graph's outputs.

A break inside an inlined call is not split there: capture restarts and runs that whole
call for real at the call site (:class:`InlinedBreak`), where the callee gets its own
compiled wrapper.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import torch
from ember.frontend.autocast import AutocastRestore, compile_without_autocast
from ember.frontend.bytecode.autocast_blocks import AutocastTracker
from ember.frontend.bytecode.breaks import BreakInfo, GraphBreak, UnhandledException
from ember.frontend.bytecode.calls import CallHandler
from ember.frontend.bytecode.capture import CaptureContext
from ember.frontend.bytecode.exception_ops import ExcInfoSource, ProfilerRangeExit
from ember.frontend.bytecode.frame import NULL, UNBOUND, Frame, FrameState, _Marker
from ember.frontend.bytecode.grad_mode import (
    GradModeTracker,
    detach_no_grad_inputs,
    graph_grad_mode,
)
from ember.frontend.bytecode.inference_blocks import inference_blocks_closed
from ember.frontend.bytecode.interpreter import GradModeRestore, Interpreter, location_of
from ember.frontend.bytecode.iteration import ResumedIterator
from ember.frontend.bytecode.list_iterator import ListIterator
from ember.frontend.bytecode.liveness import live_locals
from ember.frontend.bytecode.recipes import EagerState, Unrebuildable
from ember.frontend.bytecode.recorded_calls import ITEM_BREAK
from ember.frontend.bytecode.segment_run import CaptureFacts, FunctionContext, Segment
from ember.frontend.bytecode.sources import (
    AttrSource,
    LocalSource,
    Source,
    StackSource,
)
from ember.frontend.bytecode.state import StateBuilder
from ember.frontend.declined_sizes import SymbolicProgramDeclined
from ember.frontend.dynamic import DynamicPolicy
from ember.frontend.free_layouts import FreeLayoutsRefused
from ember.frontend.inference_outputs import inference_outputs
from ember.frontend.shape_guards import install_shape_guards, install_stage_guards
from ember.runtime.ir import Program, SourceLocation
from ember.runtime.tracing import GraphRecorder
from ember.runtime.tracing_source import is_library_file


class InlinedBreak(Exception):
    """A break escaped an inlined call at root instruction ``ip``: restart capture with
    that call run for real."""

    def __init__(self, ip: int, info: BreakInfo) -> None:
        super().__init__(info.reason)
        self.ip, self.info = ip, info


class NeedsSymbolicShapes(Exception):
    """A static capture met a tensor the user marked dynamic, or an op whose output size
    depends on the data (``nonzero``): capture again with symbolic shapes."""


def capture_segment(
    state: FrameState,
    ctx: FunctionContext,
    break_calls: dict[int, BreakInfo],
    compile_graph: Callable[[Program], Callable[[list[Any]], list[Any]]],
    policy: DynamicPolicy | None = None,
    symbolic: bool = False,
    empty_runs_eagerly: bool = False,
) -> Segment:
    """Capture from ``state`` to the next return or break. ``policy`` decides which
    input dimensions are symbolic; ``symbolic``: record with symbolic shapes at all.
    ``empty_runs_eagerly`` (a function called from code run eagerly): a whole call with
    no graph ops and no side effects that asked ``torch.compiler.is_compiling()`` gives
    an eager segment, as torch.compile skips a frame with no graph content, so that such
    a query (transformers' ``is_torchdynamo_compiling()``) answers False to eager code.

    An exception the frame does not handle gives an eager segment
    (:attr:`Segment.eager`, :func:`_eager_segment`).

    Raises:
        InlinedBreak: a break inside an inlined call (retry with it in ``break_calls``).
        Unrebuildable: the state at the break cannot be rebuilt.
        NeedsSymbolicShapes: ``symbolic`` is False but an input was marked dynamic, or
            (unless the policy says ``dynamic=False``) an op has a data-dependent size.
        ember.frontend.dynamic.DynamicDimError: a dimension marked dynamic was
            specialised by the program.
    """
    try:
        return _capture_once(state, ctx, break_calls, compile_graph, policy, symbolic,
                             empty_runs_eagerly)
    except FreeLayoutsRefused:  # (the policy turned them off): exact layouts this time
        return _capture_once(state, ctx, break_calls, compile_graph, policy, symbolic,
                             empty_runs_eagerly)


def _capture_once(state: FrameState, ctx: FunctionContext, break_calls: dict[int, BreakInfo],
                  compile_graph: Callable[[Program], Callable[[list[Any]], list[Any]]],
                  policy: DynamicPolicy | None, symbolic: bool,
                  empty_runs_eagerly: bool) -> Segment:
    """:func:`capture_segment`, once.

    Raises:
        FreeLayoutsRefused: a free-layout input's layout was read (capture again).
    """
    cap = CaptureContext(recorder=GraphRecorder(dynamic=True) if symbolic else GraphRecorder(),
                         policy=policy or DynamicPolicy(False))
    grad0 = torch.is_grad_enabled()
    cap.guard("grad_mode", None, grad0)
    inference0 = torch.is_inference_mode_enabled()  # (the graph runs under it)
    cap.guard("global", None, ("torch.is_inference_mode_enabled()", inference0))
    cap.guard("global", None, ("torch.get_default_dtype()", torch.get_default_dtype()))
    autocast = AutocastTracker(cap)  # guards autocast's state (bytecode/autocast_blocks.py)
    frame = Frame(ctx.code, ctx.f_globals, ctx.f_builtins, {}, closure=ctx.closure)
    frame.ip = state.ip
    frame.cells = dict(state.cells)
    interp = Interpreter(cap, CallHandler(break_calls))
    interp.autocast = autocast
    cap.guards.locate = functools.partial(_guard_origin, interp, frame)
    info: BreakInfo | None = None
    unhandled = False
    # NOTE: entered before the recorder, so that it sees the ops the recorder records
    tracker = GradModeTracker(cap.recorder)
    try:
        with tracker, cap, inference_blocks_closed(interp):
            live = live_locals(ctx.code)[state.ip]
            wrapped: dict[int, Any] = {}
            try:
                for name, v in state.locals.items():
                    if name in live:  # dead locals are dropped: no input, no guard
                        frame.locals[name] = _wrap_state(cap, v, LocalSource(name), wrapped)
                frame.stack = [_wrap_state(cap, v, StackSource(i), wrapped)
                               for i, v in enumerate(state.stack)]
                frame.exc_stack = [_wrap_state(cap, v, ExcInfoSource(i), wrapped)
                                   for i, v in enumerate(state.exc_stack)]
            except GraphBreak as e:  # a value no graph may read (capture._wrap_tensor)
                raise EagerState(e.reason) from None
            for it in wrapped.values():
                it.dead_items = functools.partial(_dead_unpack_targets, interp, frame)
            while not frame.returned:
                before = frame.ip
                saved_stack, saved_kw = list(frame.stack), frame.kw_names
                try:
                    interp.step(frame)
                except GraphBreak as e:
                    if cap.data_dependent and not symbolic and cap.policy.unbacked_allowed:
                        raise NeedsSymbolicShapes from None
                    if e.symbolic_sizes:  # (strict._capture: static from now on)
                        raise SymbolicProgramDeclined(f"a call failed with symbolic sizes: "
                                                      f"{e.reason}") from None
                    # NOTE: a break after an .item() (or .tolist()) that gave u0:
                    # u0 could be live at the break, which no resume point can
                    # rebuild; break at the .item() instead, as a static capture does
                    _break_at_unbacked_item(cap, break_calls)
                    if isinstance(e, UnhandledException):
                        info, unhandled = e.info(), True
                        break
                    frame.stack, frame.kw_names, frame.ip = saved_stack, saved_kw, before
                    if e.from_inlined_call:
                        ip = before if e.root_ip is None else e.root_ip
                        raise InlinedBreak(ip, e.info()) from None
                    info = e.info()
                    break
        if cap.missed_marks:
            raise NeedsSymbolicShapes
        cap.free_layouts.check(cap.policy, ctx.code.co_qualname)
        if unhandled:
            assert info is not None
            cap.finish_guards()
            if cap.symbolic_inputs:  # (the sizes the path depends on)
                unfinished = cap.recorder.finish([])
                install_shape_guards(unfinished.forward, cap.symbolic_inputs, cap.guards.add,
                                     cap.recorder.shape_env)
            return _eager_segment(cap, state.ip, info, grad0)
        _refuse_unclosed_generators(cap)
        cap.finish_guards()
        grad_end = torch.is_grad_enabled()
        autocast_end = autocast.end()
        builder = StateBuilder(cap, state.cells)
        replays = builder.replays()
        seg_kwargs: dict[str, Any] = {}
        if frame.returned:
            seg_kwargs["returns"] = builder.recipe(frame.return_value)
        else:
            builder.state_roots = [*frame.stack, *frame.locals.values(),
                                   *(_contents(c) for c in frame.cells.values())]
            try:
                seg_kwargs["stack"] = [builder.recipe(v) for v in frame.stack]
                seg_kwargs["locals"] = {k: builder.recipe(v) for k, v in frame.locals.items()}
                seg_kwargs["cells"] = {k: builder.recipe(c) for k, c in frame.cells.items()}
                seg_kwargs["exc_stack"] = [builder.recipe(v) for v in frame.exc_stack]
            except Unrebuildable as e:  # name the break that needed the state
                assert info is not None  # the frame did not return: it broke
                where = info.location
                at = f" at {where.file}:{where.line} in {where.function}" if where else ""
                raise Unrebuildable(f"{e}; the graph break{at}: {info.reason}") from None
            seg_kwargs["break_ip"] = frame.ip
            seg_kwargs["break_info"] = info
        replays += builder.made_tensor_replays()
        no_grad = tracker.no_grad_nodes()
        program = cap.recorder.finish(builder.outputs)
        cap.free_layouts.check(cap.policy, ctx.code.co_qualname, program, cap.inputs)
        if cap.symbolic_inputs:
            install_shape_guards(program.forward, cap.symbolic_inputs, cap.guards.add,
                                 cap.recorder.shape_env)
        graph_grad = graph_grad_mode(program.forward, grad0, no_grad, tracker.grad_seen)
        if graph_grad:
            detach_no_grad_inputs(program.forward, no_grad)
        has_ops = bool(program.forward.calls()) or bool(builder.outputs)
        if empty_runs_eagerly and cap.asked_compiling and frame.returned and not (
                has_ops or replays):
            return _eager_segment(cap, state.ip, None, grad0)
        torch.set_grad_enabled(graph_grad)  # what the stages see (aot: training or not)
        autocast.restore_start()
        runner = compile_without_autocast(lambda: compile_graph(program)) if has_ops else None
        final = getattr(runner, "program", None)
        if cap.symbolic_inputs and final is not None and "forward" in final.graphs:
            install_stage_guards(program.forward, final.graphs["forward"],
                                 cap.symbolic_inputs, cap.guards.add)
        return Segment(
            start_ip=state.ip,
            guards=cap.guards,
            input_sources=[s for s, _ in cap.inputs],
            program=program if has_ops else None,
            runner=runner,
            replays=replays,
            grad_at_end=grad_end,
            graph_grad=graph_grad,
            inference_outputs=inference_outputs(builder.outputs, inference0),
            asserts=tuple(interp.symbolic_asserts),
            autocast_end=autocast_end,
            facts=CaptureFacts(tuple(cap.inlined.values()), tuple(cap.untracked_globals)),
            **seg_kwargs,
        )
    finally:
        torch.set_grad_enabled(grad0)
        autocast.restore_start()
        # NOTE: the segment keeps its guards; through this the capture (and every value
        # of the first call it read: tensors, a suspended generator) would stay alive
        cap.guards.locate = None


def _eager_segment(cap: CaptureContext, ip: int, info: BreakInfo | None,
                   grad: bool) -> Segment:
    """The eager entry at resume point ``ip``: the guards the capture collected (up to
    the unhandled exception ``info``; those of the symbolic sizes too) decide that a
    capture would take the same path, so a call they hold for runs the frame eagerly."""
    return Segment(start_ip=ip, guards=cap.guards, input_sources=[], program=None,
                   runner=None, replays=[], grad_at_end=grad, graph_grad=grad,
                   break_info=info, eager=True)


def _wrap_state(cap: CaptureContext, v: Any, source: Source, wrapped: dict[int, Any]) -> Any:
    if isinstance(v, _Marker) or v is NULL or v is UNBOUND:
        return v
    if isinstance(v, ProfilerRangeExit):
        return v
    if isinstance(v, GradModeRestore):
        cap.wrap(v.previous, AttrSource(source, "previous"))
        return v
    if isinstance(v, AutocastRestore):  # a `with torch.autocast` block open at the break
        for name in ("device", "enabled", "dtype", "cache_enabled"):
            cap.wrap(getattr(v, name), AttrSource(source, name))
        return v
    if isinstance(v, ListIterator):
        # NOTE: relative to its position (see ResumedIterator): a loop with a break in
        # its body resumes into one segment whatever iteration it is at.
        known = wrapped.get(id(v))
        if known is not None:
            return known
        cap.guard("type", source, ListIterator)
        wrapped[id(v)] = ResumedIterator(v, source, cap)
        return wrapped[id(v)]
    if isinstance(v, types.CellType):
        return v
    if isinstance(v, types.MethodType) and not isinstance(v.__self__, type):
        # e.g. the bound __exit__ of a `with` block: its object is read at every call
        cap.wrap(v.__func__, AttrSource(source, "__func__"))
        cap.wrap(v.__self__, AttrSource(source, "__self__"))
        return v
    return cap.wrap(v, source)


def _dead_unpack_targets(interp: Interpreter, root: Frame) -> tuple[bool, ...] | None:
    """For a ``FOR_ITER`` of ``root`` running now: when the item is unpacked straight
    into locals (``for i, layer in enumerate(self.layers)``), which of them are dead
    (never read afterwards); None when the item is used otherwise."""
    if interp.current_frame is not root:
        return None
    instrs, ip = root.instructions, root.ip
    if ip >= len(instrs) or instrs[ip].opname != "UNPACK_SEQUENCE":
        return None
    n = instrs[ip].arg or 0
    stores = instrs[ip + 1:ip + 1 + n]
    if len(stores) != n or any(s.opname != "STORE_FAST" for s in stores):
        return None
    live = live_locals(root.code)[ip + 1 + n]
    return tuple(s.argval not in live for s in stores)


def _guard_origin(interp: Interpreter, root: Frame) -> SourceLocation | None:
    """The user source line being captured, for a guard installed now: the innermost
    frame outside torch/Ember/the standard library; before the first instruction (the
    frame state at the resume point), the line of the resume instruction (the ``def``
    line at the function's start)."""
    frame: Frame | None = interp.current_frame
    if frame is None:
        code = root.code
        line = code.co_firstlineno if root.ip == 0 else root.instructions[root.ip].line
        return location_of(root, line)
    innermost = frame
    while frame is not None and is_library_file(frame.code.co_filename):
        frame = frame.parent
    chosen = frame if frame is not None else innermost
    return location_of(chosen, chosen.last_line)


def _break_at_unbacked_item(cap: CaptureContext, break_calls: dict[int, BreakInfo]) -> None:
    """Restart breaking at the capture's first ``.item()`` / ``.tolist()`` that gave an
    unbacked symbol, unless it breaks already.

    Raises:
        InlinedBreak: there is such a call.
    """
    if cap.unbacked_items and cap.unbacked_items[0][0] not in break_calls:
        item_ip, where, method = cap.unbacked_items[0]
        raise InlinedBreak(item_ip, BreakInfo(
            ITEM_BREAK.format(method), where, "keep the value as a tensor, or move "
            "this code out of the compiled function")) from None


def _refuse_unclosed_generators(cap: CaptureContext) -> None:
    """A generator left suspended inside a ``try``/``with`` block (a loop over it left
    early, one ``next()`` only) runs its ``finally``/``__exit__`` when Python closes it,
    which the capture never does: restart with the instruction that made it run for real
    (Python's generator then closes as in eager).

    Raises:
        InlinedBreak: such a generator exists.
    """
    suspended = [g for g in cap.generators if g.close_runs_code()]
    if not suspended:
        return
    first = min(suspended, key=lambda g: g.created_at)
    where = location_of(first.frame, first.frame.last_line)
    raise InlinedBreak(first.created_at, BreakInfo(
        f"generator {first.frame.code.co_name} left suspended inside a try/with block "
        "(its cleanup runs when Python closes it)", where,
        "exhaust the generator, or move the try/finally out of it"))


def _contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # empty
        return None
