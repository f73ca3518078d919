"""Exceptions and ``with`` blocks in the bytecode interpreter, symbolic and concrete.

While capturing, an exception the *program* raises (a ``raise`` statement, a failed
dict lookup, ``StopIteration`` from ``next()``, an error in a user ``__getitem__`` run
for real) is routed as CPython routes it: to the handler of the innermost interpreted
frame whose exception table covers the raising instruction, unwinding the inlined frames
in between (:meth:`ExceptionOps.raise_in_program`). Exceptions that are not the
program's (graph breaks, Ember's internal errors, fake-tensor limits:
:func:`~.exceptions.capture_limitation`) never reach a handler; they stay graph breaks.
An exception no interpreted frame handles (it reaches the root frame, which has no
handler for it) is not split at: the capture stops with
:class:`~.breaks.UnhandledException` and the frame's call runs eagerly as a whole, where
Python raises it for real, or takes the path only capture did not take (``if not
torch.compiler.is_compiling()``), as torch.compile skips such a frame.

A graph break inside a region whose state cannot be rebuilt from Python values (an
``except``/``finally`` block handling an exception raised in this capture, the body of a
``with`` over a ``@contextmanager`` generator or of a ``with torch.inference_mode()``)
moves to the instruction that entered the region, which then runs eagerly
(:meth:`ExceptionOps.region_start`).

``with`` blocks: ``__enter__`` and ``__exit__`` of any context manager are called like
other calls (inlined when they are Python code); ``@contextlib.contextmanager``
generators run inlined and lazily (:class:`GeneratorContext`); grad-mode blocks switch
the grad mode inside the graph, their end restores it (:mod:`.grad_mode`; inference-mode
blocks are also entered for real: :mod:`.inference_blocks`); autocast
blocks switch autocast while capturing, so the graph holds its casts
(:mod:`.autocast_blocks`).
"""

from __future__ import annotations

import contextlib
import types
from dataclasses import dataclass
from typing import Any

import torch
from ember.frontend.autocast import AutocastRestore
from ember.frontend.bytecode import opcodes
from ember.frontend.bytecode.autocast_blocks import AutocastTracker, is_autocast
from ember.frontend.bytecode.breaks import GraphBreak, UnhandledException
from ember.frontend.bytecode.code_origin import is_torch_code
from ember.frontend.bytecode.data_ops import DataOps
from ember.frontend.bytecode.escape import disable
from ember.frontend.bytecode.exceptions import capture_limitation, find_handler
from ember.frontend.bytecode.frame import Frame, location_of
from ember.frontend.bytecode.generators import InlinedGenerator
from ember.frontend.bytecode.grad_mode import GRAD_MODE_BLOCKS, GradModeRestore, block_modes
from ember.frontend.bytecode.inference_blocks import InferenceModeExit, enter_inference_block
from ember.frontend.bytecode.opcodes import Instruction
from ember.frontend.bytecode.sources import ClosureSource, LookupFails, Source, lookup_fails
from ember.runtime.ir import SourceLocation
from ember.runtime.logs import log
from ember.runtime.tracing_source import is_library_file

__all__ = ["AutocastRestore", "ExcInfoSource", "ExceptionOps", "GeneratorContext",
           "GeneratorExit_", "GradModeRestore", "LookupFails", "ProfilerRangeExit", "contextmanager_target",
           "lookup_fails"]


@dataclass(frozen=True)
class ExcInfoSource(Source):
    """Entry ``index`` of the exceptions being handled in the frame state (what a bare
    ``raise`` re-raises, after a graph break inside an ``except`` block)."""

    index: int

    def expr(self) -> str:
        return f"EXC_INFO[{self.index}]"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return state.exc_stack[self.index]


# ---- @contextlib.contextmanager ---------------------------------------------------------

_HELPER_CODE = contextlib.contextmanager(lambda: iter(())).__code__


def contextmanager_target(fn: Any) -> tuple[Any, list[Any]] | None:
    """For a function made by ``@contextlib.contextmanager`` (or a method bound to one):
    ``(decorated function, leading arguments)``; None for any other callable."""
    bound: list[Any] = []
    if isinstance(fn, types.MethodType):
        bound, fn = [fn.__self__], fn.__func__
    if not isinstance(fn, types.FunctionType) or fn.__code__ is not _HELPER_CODE:
        return None
    return fn, bound


class GeneratorContext:
    """The result of calling a ``@contextmanager`` function during capture: ``with``
    runs the generator ``func(*args, **kwargs)`` inlined, up to its ``yield``, and
    resumes it at the block's end (throwing the block's exception into it). Outside a
    capture (after a graph break) it behaves as the real context manager."""

    def __init__(self, func: types.FunctionType, args: list[Any],
                 kwargs: dict[str, Any], source: Source | None) -> None:
        self.func, self.args, self.kwargs, self.source = func, args, kwargs, source
        self._real: Any = None

    # NOTE: entered for real (a break moved to its `with`), it stays real to its end:
    # calls of these two never run symbolically
    @disable
    def __enter__(self) -> Any:
        self._real = contextlib.contextmanager(self.func)(*self.args, **self.kwargs)
        return self._real.__enter__()

    @disable
    def __exit__(self, *exc: object) -> Any:
        return self._real.__exit__(*exc)


class GeneratorExit_:
    """``__exit__`` of a :class:`GeneratorContext` on the stack: the suspended inlined
    generator, and the root instruction of the ``with`` (where a break inside the block
    moves: the suspended generator cannot be rebuilt)."""

    def __init__(self, gen: InlinedGenerator, region_ip: int | None) -> None:
        self.gen, self.region_ip = gen, region_ip


@disable  # its calls are graph breaks: the state change happens at run time
class EagerExit:
    """``__exit__`` of a torch context manager entered for real at a graph break (e.g.
    ``torch.device``): the block's end runs for real too, never on fake tensors, so
    the global state it restores is restored at every call."""

    def __init__(self, cm: Any) -> None:
        self.cm = cm

    def __call__(self, *exc: Any) -> Any:
        return type(self.cm).__exit__(self.cm, *exc)


class ProfilerRangeExit:
    """``__exit__`` of a ``torch.autograd.profiler.record_function`` block inside a
    graph: the block is captured with its body, and no profiler range is recorded around
    the compiled code (as torch.compile does). Stateless, so a break inside the block can
    rebuild it."""

    def __call__(self, *exc: Any) -> bool:
        return False


_GRAD_MODE_TYPES = tuple(GRAD_MODE_BLOCKS)
_PROFILER_RANGES = (torch.autograd.profiler.record_function,)


def _is_torch_class(cls: type) -> bool:
    module = getattr(cls, "__module__", "") or ""
    return module == "torch" or module.startswith("torch.")


def _is_torch_context(cm: Any) -> bool:
    """A context manager of torch's: an instance of a torch class, or the object a
    torch ``@contextmanager`` function returns (``torch.backends.cudnn.flags(...)``: a
    ``contextlib`` object whose generator is torch's). Either switches global state: its
    ``with`` and the block's end run eagerly, never inlined (an inlined ``contextlib``
    ``__enter__`` deletes the object's arguments before its generator breaks, and the
    real ``__enter__`` at the break then fails)."""
    if _is_torch_class(type(cm)):
        return True
    if isinstance(cm, GeneratorContext):  # made at this call, entered for real at the break
        return is_torch_code(cm.func)
    return (type(cm).__module__ == "contextlib" and isinstance(cm, contextlib.ContextDecorator)
            and is_torch_code(getattr(cm, "func", None)))


def _context_name(cm: Any) -> str:
    func = getattr(cm, "func", None) if not _is_torch_class(type(cm)) else None
    if func is not None:
        return f"{func.__module__}.{func.__qualname__}(...)"
    return str(type(cm).__qualname__)


class ExceptionOps(DataOps):
    """The exception and ``with`` opcodes; see the module docstring."""

    current_frame: Frame | None
    # the autocast blocks of the capture (set by the segment's capture; None: concrete)
    autocast: AutocastTracker | None = None
    # the inference-mode blocks open in the capture (.inference_blocks; None: concrete)
    inference_blocks: list[InferenceModeExit] | None = None

    def init_exception_state(self) -> None:
        # exceptions known to be the program's (kept alive: keyed by id)
        self._program_exceptions: dict[int, BaseException] = {}
        # id(exception) -> root instruction index where it reached the root frame
        self._origins: dict[int, int] = {}
        # id(exception) -> (the user's line, the library's line) where it was raised
        self._raise_sites: dict[int, tuple[SourceLocation, SourceLocation | None]] = {}

    # ---- routing ------------------------------------------------------------------------

    def raise_in_program(self, frame: Frame, ins: Instruction, exc: BaseException) -> None:
        """``exc`` was raised by instruction ``ins`` of ``frame`` (whose ``ip`` is past
        it) while capturing: route it to the frame's handler, unwind the frame (raise it
        again for the calling frame), or, at the root, stop the capture: the frame runs
        eagerly (:class:`~.breaks.UnhandledException`)."""
        first = id(exc) not in self._program_exceptions
        if first:
            if not isinstance(exc, Exception):
                raise exc  # KeyboardInterrupt and friends: not the program's
            why = capture_limitation(exc)
            if why is not None:
                raise self._break_for(frame, ins, exc, f"({why})") from exc
            self._program_exceptions[id(exc)] = exc
            self._raise_sites[id(exc)] = _raise_site(frame, ins)
            self._guard_failed_lookup(frame, ins, exc)
            self._set_context(frame, exc)
            if self.capture is not None:  # a new exception at each call, as eagerly
                self.capture.note_made(exc)
        if frame.parent is None:
            self._origins.setdefault(id(exc), frame.ip - 1)
        entry = find_handler(frame.code, ins.offset)
        if entry is None:
            self._unwind(frame, ins, exc)
            return
        exc.__traceback__ = None  # Ember's frames, not the program's
        del frame.stack[entry.depth:]
        if entry.lasti:
            frame.push(ins.offset)
        frame.push(exc)
        frame.kw_names = ()
        frame.ip = opcodes.index_of_offset(frame.code, entry.target)

    def _unwind(self, frame: Frame, ins: Instruction, exc: BaseException) -> None:
        if frame.parent is not None:
            # no handler here: the frame is left (a generator is finished) and the
            # calling frame's instruction raises it
            frame.returned, frame.return_value = True, None
            if frame.yielded is not None and isinstance(exc, StopIteration):
                error = RuntimeError("generator raised StopIteration")
                error.__cause__ = exc
                self._program_exceptions[id(error)] = error
                if id(exc) in self._raise_sites:
                    self._raise_sites[id(error)] = self._raise_sites[id(exc)]
                raise error
            raise exc
        # no handler in the root frame: the frame's call runs eagerly as a whole
        unhandled = UnhandledException(exc)
        site = self._raise_sites.get(id(exc))
        unhandled.location, unhandled.library_location = (
            site if site is not None else (location_of(frame, ins.line), None))
        raise unhandled from exc

    def _break_for(self, frame: Frame, ins: Instruction, exc: BaseException,
                   why: str) -> GraphBreak:
        err = GraphBreak(f"{type(exc).__name__} raised during capture {why}: {exc}",
                         "the raising code runs eagerly, where Python raises and handles "
                         "the exception")
        err.location = location_of(frame, ins.line)
        return err

    def _set_context(self, frame: Frame, exc: BaseException) -> None:
        """CPython chains a new exception to the one being handled (``__context__``)."""
        f: Frame | None = frame
        while f is not None:
            if f.exc_stack:
                handled = f.exc_stack[-1]
                if isinstance(handled, BaseException) and handled is not exc:
                    exc.__context__ = handled
                return
            f = f.parent

    def _guard_failed_lookup(self, frame: Frame, ins: Instruction, exc: BaseException) -> None:
        """A failed ``obj[key]`` / ``obj.name`` on an outside object decides which
        handler runs: guard that it still fails. (Outside lists and dicts are shadows
        whose length and keys are guarded already.)"""
        cap = self.capture
        if cap is None:
            return
        if isinstance(exc, LookupError) and ins.opname == "BINARY_SUBSCR":
            obj, key, attribute = frame.stack[-2], frame.stack[-1], False
        elif isinstance(exc, AttributeError) and ins.opname in ("LOAD_ATTR", "LOAD_METHOD"):
            obj, key, attribute = frame.stack[-1], ins.argval, True
        else:
            return
        self.guard_lookup_fails(obj, key, attribute)

    def guard_lookup_fails(self, obj: Any, key: Any, attribute: bool) -> None:
        """Guard that ``obj[key]`` (``obj.key``) still raises, when ``obj`` came from
        outside (a failed ``hasattr``, ``getattr`` with a default, a handled lookup)."""
        cap = self.capture
        if cap is None or (not attribute and (not isinstance(key, (int, str))
                                              or isinstance(key, bool))):
            return
        if attribute and (not isinstance(key, str) or (id(obj), key) in cap.attr_writes):
            return  # (deleted by this capture: it existed at the start)
        source = cap.source_of(obj)
        if source is not None and id(obj) not in cap.shadows:
            cap.guard("equals", LookupFails(source, key, attribute), True)

    def region_start(self, frame: Frame, err: GraphBreak) -> None:
        """A break at the root while an exception raised in this capture is being
        handled, or inside a ``with`` over an inlined generator: the break moves to the
        instruction that entered that region (see the module docstring). An unhandled
        exception does not move: the whole frame runs eagerly."""
        if isinstance(err, UnhandledException):
            return
        starts = [self._origins[id(v)] for v in (*frame.stack, *frame.exc_stack)
                  if isinstance(v, BaseException) and id(v) in self._origins]
        starts += [v.region_ip for v in frame.stack
                   if isinstance(v, (GeneratorExit_, InferenceModeExit))
                   and v.region_ip is not None]
        if not starts:
            return
        if err.from_inlined_call and err.root_ip is not None:
            starts.append(err.root_ip)
        err.from_inlined_call = True
        err.root_ip = min(starts)
        err.reason += (" (inside an except/finally block, a @contextmanager with block or "
                       "an inference_mode block: the code from where it was entered runs "
                       "eagerly)")

    def throw_into(self, gen: InlinedGenerator, exc: BaseException) -> None:
        """``gen.throw(exc)``: raise ``exc`` at the ``yield`` the generator is suspended
        at (routed to its handler, or out of it)."""
        frame = gen.frame
        self._program_exceptions[id(exc)] = exc
        self.raise_in_program(frame, frame.instructions[frame.ip - 1], exc)

    # ---- exception opcodes --------------------------------------------------------------

    def op_PUSH_EXC_INFO(self, f: Frame, ins: Instruction) -> None:
        value = f.pop()
        f.push(f.exc_stack[-1] if f.exc_stack else None)
        f.exc_stack.append(value)
        f.push(value)

    def op_POP_EXCEPT(self, f: Frame, ins: Instruction) -> None:
        f.pop()
        if f.exc_stack:
            f.exc_stack.pop()

    def op_CHECK_EXC_MATCH(self, f: Frame, ins: Instruction) -> None:
        right = f.stack[-1]
        classes = right if isinstance(right, tuple) else (right,)
        if not all(isinstance(c, type) and issubclass(c, BaseException) for c in classes):
            raise TypeError("catching classes that do not inherit from BaseException is "
                            "not allowed")
        f.pop()
        f.push(isinstance(f.stack[-1], right))

    def op_RERAISE(self, f: Frame, ins: Instruction) -> None:
        exc = f.pop()
        self._raise_program(exc)

    def op_RAISE_VARARGS(self, f: Frame, ins: Instruction) -> None:
        n = ins.arg or 0  # 0: bare `raise`; 1: `raise exc`; 2: `raise exc from cause`
        if n == 0:
            handled = self._handled_exception(f)
            if handled is None:
                self._raise_program(RuntimeError("No active exception to reraise"))
            self._raise_program(handled)
        cause = f.stack[-1] if n == 2 else None
        exc = self._instance(f, f.stack[-1 - (n == 2)])
        if n == 2:
            if cause is not None:
                cause = self._instance(f, cause)
            exc.__cause__ = cause  # also sets __suppress_context__, as `from` does
        f.popn(n)
        self._set_context(f, exc)
        self._raise_program(exc)

    def _instance(self, f: Frame, value: Any) -> BaseException:
        if isinstance(value, type) and issubclass(value, BaseException):
            made = self.calls.call(self, f, value, [], {})
            assert isinstance(made, BaseException)
            return made
        if isinstance(value, BaseException):
            return value
        raise TypeError("exceptions must derive from BaseException")

    def _handled_exception(self, f: Frame) -> BaseException | None:
        frame: Frame | None = f
        while frame is not None:
            if frame.exc_stack:
                top = frame.exc_stack[-1]
                return top if isinstance(top, BaseException) else None
            frame = frame.parent
        return None

    def _raise_program(self, exc: Any) -> None:
        if not isinstance(exc, BaseException):
            raise TypeError("exceptions must derive from BaseException")
        if self.symbolic:
            self._program_exceptions[id(exc)] = exc
        raise exc

    def op_CALL_INTRINSIC_1(self, f: Frame, ins: Instruction) -> None:
        if ins.arg != opcodes.INTRINSIC_STOPITERATION_ERROR:
            super().op_CALL_INTRINSIC_1(f, ins)
            return
        value = f.pop()
        if isinstance(value, StopIteration):  # PEP 479, in a generator's handler (3.12)
            error = RuntimeError("generator raised StopIteration")
            error.__cause__ = value
            value = error
        f.push(value)

    # ---- with blocks --------------------------------------------------------------------

    def op_BEFORE_WITH(self, f: Frame, ins: Instruction) -> None:
        cm = f.stack[-1]
        if isinstance(cm, _GRAD_MODE_TYPES) and (
                self.symbolic or not isinstance(cm, torch.inference_mode)):
            modes = block_modes(cm)
            if modes is None:
                raise self.fail(f"{cm!r} inside inference mode (leaving it in a graph)",
                                "the block runs eagerly")
            inside, restored = modes
            f.pop()
            if isinstance(cm, torch.inference_mode):  # entered for real (.inference_blocks)
                f.push(enter_inference_block(self, cm, f.ip - 1 if f.parent is None else None))
            else:
                torch.set_grad_enabled(inside)
                f.push(GradModeRestore(restored))
            f.push(None)  # what their __enter__ returns
            return
        if isinstance(cm, _PROFILER_RANGES) and self.symbolic:
            log("graphs", f"profiler range {getattr(cm, 'name', '?')!r} captured without "
                "its range: the compiled code records none")
            f.pop()
            f.push(ProfilerRangeExit())
            f.push(cm)  # what record_function.__enter__ returns
            return
        if is_autocast(cm) and self.symbolic:
            assert self.autocast is not None, "a capture without its AutocastTracker"
            restore = self.autocast.enter(self, cm)
            f.pop()
            f.push(restore)
            f.push(cm)  # what autocast.__enter__ returns
            return
        if not self.symbolic:
            exit_fn = type(cm).__exit__.__get__(cm)
            if _is_torch_context(cm):
                exit_fn = EagerExit(cm)
            result = type(cm).__enter__(cm)
            f.pop()
            f.push(exit_fn)
            f.push(result)
            return
        if isinstance(cm, GeneratorContext) and not is_torch_code(cm.func):
            self._enter_generator(f, cm)
            return
        cls = type(cm)
        enter, exit_ = getattr(cls, "__enter__", None), getattr(cls, "__exit__", None)
        if enter is None or exit_ is None:
            raise TypeError(f"'{cls.__name__}' object does not support the context manager "
                            f"protocol{'' if enter is None else ' (missed __exit__ method)'}")
        if _is_torch_context(cm):
            raise self.fail(f"context manager {_context_name(cm)}",
                            "of torch's context managers grad-mode blocks (no_grad, "
                            "enable_grad, set_grad_enabled, inference_mode), torch.autocast "
                            "and record_function are captured; the others switch global "
                            "state, so the `with` and the block's end run eagerly")
        result = self.calls.call(self, f, enter.__get__(cm, cls), [], {})
        f.pop()
        f.push(exit_.__get__(cm, cls))
        f.push(result)

    def _enter_generator(self, f: Frame, cm: GeneratorContext) -> None:
        gen = self.calls.inline(self, f, cm.func, list(cm.args), dict(cm.kwargs), cm.source)
        if not isinstance(gen, InlinedGenerator):
            raise self.fail(f"@contextmanager function {cm.func.__qualname__} is not a "
                            "generator")
        has, value = gen.advance()
        if not has:
            self._raise_program(RuntimeError("generator didn't yield"))
        f.pop()
        f.push(GeneratorExit_(gen, f.ip - 1 if f.parent is None else None))
        f.push(value)

    def call_generator_exit(self, exit_fn: GeneratorExit_, args: list[Any]) -> bool:
        """``__exit__(type, value, traceback)`` of a ``@contextmanager`` block (what
        ``contextlib`` does): resume the generator, or throw the block's exception into
        it; True when the generator swallowed the exception."""
        gen, value = exit_fn.gen, args[1] if len(args) > 1 else None
        if value is None:
            has, _ = gen.advance()
            if has:
                self._raise_program(RuntimeError("generator didn't stop"))
            return False
        try:
            self.throw_into(gen, value)
            has, _ = gen.advance()
        except GraphBreak:
            raise
        except BaseException as raised:  # the program's exception
            if raised is value:
                return False
            if isinstance(raised, RuntimeError) and raised.__cause__ is value:
                return False  # StopIteration thrown in came back as PEP 479's error
            raise
        if has:
            self._raise_program(RuntimeError("generator didn't stop after throw()"))
        return True

    def op_WITH_EXCEPT_START(self, f: Frame, ins: Instruction) -> None:
        exit_fn, value = f.stack[-4], f.stack[-1]
        args = [type(value), value, value.__traceback__]
        if self.symbolic:
            if isinstance(exit_fn, GeneratorExit_):
                f.push(self.call_generator_exit(exit_fn, args))
                return
            f.push(self.calls.call(self, f, exit_fn, args, {}))
            return
        f.push(exit_fn(*args))

    def construct_exception(self, frame: Frame, cls: type[BaseException], args: list[Any],
                            kwargs: dict[str, Any]) -> BaseException:
        """``cls(*args)`` for an exception class: built-in ``__init__`` runs directly,
        a Python one is inlined on the new object."""
        if type(cls).__call__ is not type.__call__ or isinstance(cls.__new__,
                                                                 types.FunctionType):
            raise self.fail(f"constructing a {cls.__qualname__} (custom __new__ or "
                            "metaclass)", "create it outside the compiled function")
        init = cls.__init__
        if not isinstance(init, types.FunctionType):
            made: BaseException = self.calls.direct(self, cls, args, kwargs)
            return made
        obj = cls.__new__(cls, *args)
        assert self.capture is not None
        self.capture.new_objects[id(obj)] = obj
        self.calls.inline(self, frame, init, [obj, *args], kwargs, None)
        return obj

    def generator_context(self, fn: types.FunctionType, bound: list[Any],
                          args: list[Any], kwargs: dict[str, Any]) -> GeneratorContext:
        """Calling a ``@contextmanager`` function: the decorated generator function is
        read from its closure (guarded through the decorator's source)."""
        index = fn.__code__.co_freevars.index("func")
        func = fn.__closure__[index].cell_contents  # type: ignore[index]
        cap = self.capture
        source = cap.source_of(fn) if cap is not None else None
        func_source = ClosureSource(source, index) if source is not None else None
        if func_source is not None:
            func = self.wrap(func, func_source)
        made = GeneratorContext(func, [*bound, *args], kwargs, func_source)
        if cap is not None:  # a fresh object: re-created from its attributes at a break
            cap.new_objects[id(made)] = made
        return made


def _raise_site(frame: Frame, ins: Instruction) -> tuple[SourceLocation, SourceLocation | None]:
    """Where an exception is raised: the innermost user line (outside torch, Ember and the
    standard library) and, when the raising line is in such a library, that line."""
    user = frame
    while user.parent is not None and is_library_file(user.code.co_filename):
        user = user.parent
    here = location_of(frame, ins.line)
    if user is frame:
        return here, None
    return location_of(user, user.last_line), here
