"""The bytecode interpreter: one method per (normalised) opcode, ``op_<OPNAME>``.

It runs in one of two modes:

* **symbolic** (``capture`` is a :class:`~.capture.CaptureContext`): tensors are fake
  tensors whose ops the recorder turns into graph nodes; outside values go through
  ``capture.wrap`` (guards); code that cannot be captured raises
  :class:`~.breaks.GraphBreak` *before* changing the frame, so the caller can run that
  instruction for real instead.
* **concrete** (``capture`` is None): real values, every instruction runs for real. The
  runtime uses it to execute the instruction at a graph break, and to finish a frame
  that cannot be captured any more.

This module drives frames and holds the control-flow, call and generator opcodes;
exceptions and ``with`` blocks are in :mod:`.exception_ops`, loads, stores, operators
and containers in :mod:`.data_ops` (its bases). Calls are handled in :mod:`.calls`
(inlining, builtins, torch functions, modules).
"""

from __future__ import annotations

import types
from typing import Any

from ember.frontend.bytecode import opcodes
from ember.frontend.bytecode.assert_messages import SymbolicAssert
from ember.frontend.bytecode.breaks import GraphBreak
from ember.frontend.bytecode.capture import CaptureContext
from ember.frontend.bytecode.class_ops import ClassOps
from ember.frontend.bytecode.data_ops import (
    function_str,
    is_fake_tensor,
    is_star_iterable,
)
from ember.frontend.bytecode.exception_ops import ExceptionOps, GradModeRestore
from ember.frontend.bytecode.exceptions import find_handler
from ember.frontend.bytecode.frame import NULL, Frame, location_of
from ember.frontend.bytecode.generators import InlinedGenerator, LazyIterator
from ember.frontend.bytecode.inlined_breaks import InlinedBreaks
from ember.frontend.bytecode.iteration import make_iterator
from ember.frontend.bytecode.list_iterator import ListIterator
from ember.frontend.bytecode.match_ops import MatchOps
from ember.frontend.bytecode.opcodes import Instruction
from ember.frontend.bytecode.tensor_asserts import record_assert
from ember.runtime.tracing_source import is_library_file

__all__ = ["MAX_INLINE_DEPTH", "GradModeRestore", "Interpreter", "is_fake_tensor",
           "location_of"]  # GradModeRestore: see .exception_ops

MAX_INLINE_DEPTH = 32


class Interpreter(ExceptionOps, MatchOps, ClassOps):
    """Interprets frames; see the module docstring. ``call_rules`` decides calls."""

    def __init__(self, capture: CaptureContext | None, calls: Any) -> None:
        self.capture = capture
        self.calls = calls  # a .calls.CallHandler
        if capture is not None and isinstance(calls.break_calls, InlinedBreaks):
            calls.break_calls.attempt = capture.guards  # what decides an inlined break
        self.current_frame: Frame | None = None
        # the asserts recorded as checks of data-dependent sizes (.assert_messages)
        self.symbolic_asserts: list[SymbolicAssert] = []
        # calls run for real on fake tensors now running (.recorded_calls, .iteration)
        self.calls_run_for_real = 0
        self.init_exception_state()

    # ---- driving ------------------------------------------------------------------------

    def run_frame(self, frame: Frame) -> Any:
        """Run ``frame`` to its return; return the value."""
        while not frame.returned:
            self.step(frame)
        return frame.return_value

    def step(self, frame: Frame) -> None:
        """Run one instruction of ``frame``."""
        ins = frame.instructions[frame.ip]
        frame.ip += 1
        self.current_frame = frame
        if self.capture is not None and ins.line != frame.last_line:
            frame.last_line = ins.line
            self.capture.recorder.set_source(location_of(frame, ins.line))
        if self.capture is not None and frame.parent is None:
            inlined = self.calls.break_calls.get(frame.ip - 1)
            if inlined is not None:
                # this instruction inlined code that broke: run it for real instead
                frame.ip -= 1
                err = GraphBreak(inlined.reason, inlined.hint)
                err.location, err.library_location = inlined.location, inlined.library_location
                raise err
        handler = getattr(self, "op_" + ins.opname, None)
        if handler is None:
            frame.ip -= 1
            raise GraphBreak(f"unsupported bytecode {ins.opname}",
                             "rewrite this line with plainer Python")
        try:
            try:
                handler(frame, ins)
            except GraphBreak:
                raise
            except BaseException as e:  # goes where CPython would send it
                if self.symbolic:
                    self.raise_in_program(frame, ins, e)
                elif isinstance(e, Exception):
                    self._handle_exception(frame, ins, e)
                else:
                    raise
        except GraphBreak as e:
            if e.location is None:
                e.location = location_of(frame, ins.line)
                user = frame
                while user.parent is not None and is_library_file(user.code.co_filename):
                    user = user.parent
                if user is not frame:  # name the user's line, and where in the library
                    e.location, e.library_location = (location_of(user, user.last_line),
                                                      e.location)
            frame.ip -= 1
            if frame.parent is None:
                self.region_start(frame, e)
            raise

    def _handle_exception(self, frame: Frame, ins: Instruction, exc: Exception) -> None:
        """Route ``exc`` to the frame's handler (exception table), or re-raise it."""
        entry = find_handler(frame.code, ins.offset)
        if entry is None:
            raise exc
        del frame.stack[entry.depth:]
        if entry.lasti:
            frame.push(ins.offset)
        frame.push(exc)
        frame.ip = opcodes.index_of_offset(frame.code, entry.target)

    # ---- no-ops and stack shuffles ------------------------------------------------------

    def op_NOP(self, f: Frame, ins: Instruction) -> None:
        pass

    op_RESUME = op_NOP
    op_CACHE = op_NOP
    op_PRECALL = op_NOP
    op_EXTENDED_ARG = op_NOP
    op_JUMP_NO_INTERRUPT = op_NOP  # never produced after normalisation; kept harmless

    def op_POP_TOP(self, f: Frame, ins: Instruction) -> None:
        f.pop()

    def op_END_FOR(self, f: Frame, ins: Instruction) -> None:
        f.popn(2)

    def op_PUSH_NULL(self, f: Frame, ins: Instruction) -> None:
        f.push(NULL)

    def op_COPY(self, f: Frame, ins: Instruction) -> None:
        f.push(f.stack[-ins.oparg])

    def op_SWAP(self, f: Frame, ins: Instruction) -> None:
        s = f.stack
        s[-1], s[-ins.oparg] = s[-ins.oparg], s[-1]

    def op_KW_NAMES(self, f: Frame, ins: Instruction) -> None:
        f.kw_names = tuple(f.code.co_consts[ins.oparg])

    # ---- control flow --------------------------------------------------------------------

    def op_JUMP(self, f: Frame, ins: Instruction) -> None:
        f.ip = ins.jump_target

    op_JUMP_FORWARD = op_JUMP
    op_JUMP_BACKWARD = op_JUMP
    op_JUMP_BACKWARD_NO_INTERRUPT = op_JUMP
    op_JUMP_ABSOLUTE = op_JUMP

    def op_POP_JUMP_IF_TRUE(self, f: Frame, ins: Instruction) -> None:
        if self.capture is not None and record_assert(self, f, ins, True):
            return  # an assert on a tensor's value: checked in the graph
        if self.truth(f.stack[-1]):
            f.ip = ins.jump_target
        f.pop()

    def op_POP_JUMP_IF_FALSE(self, f: Frame, ins: Instruction) -> None:
        if self.capture is not None and record_assert(self, f, ins, False):
            return
        if not self.truth(f.stack[-1]):
            f.ip = ins.jump_target
        f.pop()

    def op_POP_JUMP_IF_NONE(self, f: Frame, ins: Instruction) -> None:
        if f.pop() is None:
            f.ip = ins.jump_target

    def op_POP_JUMP_IF_NOT_NONE(self, f: Frame, ins: Instruction) -> None:
        if f.pop() is not None:
            f.ip = ins.jump_target

    def op_JUMP_IF_TRUE_OR_POP(self, f: Frame, ins: Instruction) -> None:
        if self.truth(f.stack[-1]):
            f.ip = ins.jump_target
        else:
            f.pop()

    def op_JUMP_IF_FALSE_OR_POP(self, f: Frame, ins: Instruction) -> None:
        if not self.truth(f.stack[-1]):
            f.ip = ins.jump_target
        else:
            f.pop()

    def op_GET_ITER(self, f: Frame, ins: Instruction) -> None:
        it = make_iterator(f.stack[-1], self)
        f.pop()
        f.push(it)

    def op_FOR_ITER(self, f: Frame, ins: Instruction) -> None:
        it = f.stack[-1]
        if isinstance(it, LazyIterator):  # an inlined generator: runs to its next yield
            has, value = it.advance()
            if has:
                f.push(value)
            else:
                self._end_loop(f, ins)
            return
        if not isinstance(it, ListIterator):
            if self.symbolic:
                raise self.fail(f"iteration over a {type(it).__name__}")
            try:
                f.push(next(it))
            except StopIteration:
                self._end_loop(f, ins)
            return
        if it.exhausted():
            self._end_loop(f, ins)
        else:
            f.push(it.next())

    def _end_loop(self, f: Frame, ins: Instruction) -> None:
        f.pop()
        f.ip = ins.jump_target + 1 if opcodes.PY312 else ins.jump_target

    # ---- functions and calls ------------------------------------------------------------------

    def op_MAKE_FUNCTION(self, f: Frame, ins: Instruction) -> None:
        code = f.pop()
        flags = ins.oparg
        closure = f.pop() if flags & 0x08 else None
        annotations = f.pop() if flags & 0x04 else None
        kwdefaults = f.pop() if flags & 0x02 else None
        defaults = f.pop() if flags & 0x01 else None
        fn = types.FunctionType(code, f.f_globals, code.co_name, defaults, closure)
        if kwdefaults:
            fn.__kwdefaults__ = kwdefaults
        if annotations:
            fn.__annotations__ = dict(zip(annotations[::2], annotations[1::2])) if isinstance(
                annotations, tuple) else annotations
        fn.__qualname__ = code.co_qualname
        if self.capture is not None:
            self.capture.new_functions[id(fn)] = fn  # held: its id stays its own
        f.push(fn)

    def op_CALL(self, f: Frame, ins: Instruction) -> None:
        argc = ins.oparg
        kw_names = f.kw_names
        f.kw_names = ()
        below = f.stack[-argc - 2:-argc] if argc else f.stack[-2:]
        args = f.stack[len(f.stack) - argc:] if argc else []
        if below[0] is NULL:
            fn, pos = below[1], list(args)
        else:
            fn, pos = below[0], [below[1]] + list(args)
        n_kw = len(kw_names)
        kwargs = dict(zip(kw_names, pos[len(pos) - n_kw:])) if n_kw else {}
        if n_kw:
            pos = pos[: len(pos) - n_kw]
        try:
            result = self.calls.call(self, f, fn, pos, kwargs)
        except GraphBreak:
            f.kw_names = kw_names
            raise
        f.popn(argc + 2)
        f.push(result)

    def op_CALL_FUNCTION_EX(self, f: Frame, ins: Instruction) -> None:
        has_kwargs = ins.oparg & 1
        kwargs = dict(f.stack[-1]) if has_kwargs else {}
        args_obj = f.stack[-1 - has_kwargs]
        fn = f.stack[-2 - has_kwargs]
        if not is_star_iterable(args_obj):
            raise TypeError(f"{function_str(fn)} argument after * must be an iterable, not "
                            f"{type(args_obj).__name__}")
        args = self.iterate(args_obj) if not isinstance(args_obj, tuple) else list(args_obj)
        result = self.calls.call(self, f, fn, args, kwargs)
        f.popn(3 + has_kwargs)
        f.push(result)

    # ---- generators (resumed lazily while inlined; see .generators) -----------------------

    def op_RETURN_GENERATOR(self, f: Frame, ins: Instruction) -> None:
        if f.yielded is None:
            raise self.fail("generator code outside an inlined generator call")
        f.push(None)  # the value of the first send(), popped by the next POP_TOP

    def op_YIELD_VALUE(self, f: Frame, ins: Instruction) -> None:
        if f.yielded is None:
            raise self.fail("yield outside an inlined generator call")
        f.yielded.append(f.pop())
        f.push(None)

    # `yield from` in an inlined generator: the delegate advances one value per SEND
    def op_GET_YIELD_FROM_ITER(self, f: Frame, ins: Instruction) -> None:
        if not isinstance(f.stack[-1], LazyIterator):  # an inlined generator stays itself
            self.op_GET_ITER(f, ins)

    def op_SEND(self, f: Frame, ins: Instruction) -> None:
        if f.yielded is None:
            raise self.fail("yield from outside an inlined generator call")
        if f.pop() is not None:
            raise self.fail("a value sent through `yield from` (generator.send)")
        it = f.stack[-1]
        if isinstance(it, LazyIterator):
            has, value = it.advance()
        elif isinstance(it, ListIterator):
            has = not it.exhausted()
            value = it.next() if has else None
        else:
            raise self.fail(f"yield from a {type(it).__name__}")
        if has:
            f.push(value)  # yielded by the YIELD_VALUE that follows
            return
        # the delegate's return value: the value of the `yield from` expression
        result = it.frame.return_value if isinstance(it, InlinedGenerator) else None
        if opcodes.PY312:
            f.push(result)  # END_SEND at the target drops the delegate
        else:
            f.stack[-1] = result
        f.ip = ins.jump_target

    def op_END_SEND(self, f: Frame, ins: Instruction) -> None:
        del f.stack[-2]
