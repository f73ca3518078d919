"""The Python the trace capture watches while it runs the user's function.

The trace capture (``capture="trace"``) runs the function's Python once, at capture,
on fake tensors; later calls run only the recorded graph. Two kinds of Python code
cannot be right under that model, and :func:`watched_python` (a profile function,
``sys.setprofile``, active only while the trace runs) catches them:

====================================  ================================================
what the traced code does             what the trace does
====================================  ================================================
calls a function marked               refuses before the function's body runs:
``ember.frontend.disable`` or         :class:`DisabledCallInTrace` (``trace.py`` turns
``torch.compiler.disable`` (user      it into a ``CaptureError`` naming the call's
code: torch's and Ember's are traced) line), also when the code catches it
rebinds a global (``global n;         :class:`TraceSideEffectWarning` at capture, naming
n += 1``) or a variable of an         the line and the variable: the write happened
enclosing function (``nonlocal``)     once, at capture, and no later call repeats it
rebinds a plain attribute of the      the same warning, naming ``self.<attribute>``
compiled module or a submodule        (:func:`warn_rebound_attributes`, a snapshot of
(``self.step += 1``)                  the modules' ``__dict__`` s around the trace)
====================================  ================================================

Only the user's own code is watched (not torch, Ember, the standard library, nor
installed packages, whose lazy initialisations run during a first trace); a variable of
a function that ran in the same trace (a comprehension's walrus target) is not state
kept between calls. A write is reported when the variable's value at the frame's return is not
the object it held when the frame started (a store of the same object is not a
change). Writes into objects (``LOG.append(x)``, ``obj.n += 1``) are not seen. When a
profiler is already installed (``cProfile``, a debugger's profile function), nothing is
watched; that is logged under ``EMBER_LOGS=fallbacks``.
"""

from __future__ import annotations

import contextlib
import dis
import linecache
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import CodeType, FrameType, FunctionType
from typing import Any

from ember.frontend._torch import dynamo_disable_wrapper_code, dynamo_disabled_callee, is_fake
from ember.runtime.ir import SourceLocation
from ember.runtime.logs import log
from ember.runtime.tracing_source import is_library_file, user_source_location

__all__ = ["DisabledCallInTrace", "PythonWatch", "TraceSideEffectWarning", "module_attributes",
           "restore_fake_attributes", "warn_rebound_attributes", "watched_python"]

_MISSING = object()
_GLOBAL_STORES = {"STORE_GLOBAL", "DELETE_GLOBAL"}
_CELL_STORES = {"STORE_DEREF", "DELETE_DEREF"}


class DisabledCallInTrace(RuntimeError):
    """A function marked to run eagerly was called inside a traced function."""

    def __init__(self, message: str, where: SourceLocation | None) -> None:
        super().__init__(message)
        self.where = where


class TraceSideEffectWarning(UserWarning):
    """The traced function rebound a global or nonlocal variable: with the trace
    capture that happens once, at capture, not at every call."""


@dataclass(frozen=True)
class _Stores:
    """The variables a code object may rebind outside its frame: globals and free
    variables (``nonlocal``), each with the line of its first store."""

    globals: dict[str, int]
    cells: dict[str, int]


@dataclass
class PythonWatch:
    """What one trace's Python did: the refused call (if any) and the rebound variables
    (``(code, kind, name)`` -> line), in the order first seen."""

    refused: DisabledCallInTrace | None = None
    rebound: dict[tuple[CodeType, str, str], int] = field(default_factory=dict)
    # variables left holding a fake tensor of the trace (described), and the globals'
    # values before it, by (namespace id, name)
    fakes: list[str] = field(default_factory=list)
    originals: dict[tuple[int, str], tuple[dict[str, Any], str, Any]] = field(
        default_factory=dict)
    _open: dict[FrameType, tuple[_Stores, dict[str, Any], dict[str, Any]]] = field(
        default_factory=dict)

    def hook(self) -> Callable[[FrameType, str, Any], None]:
        """The profile function: a code's action is decided once (most codes: none)."""
        actions: dict[CodeType, Any] = {}
        defined_in_trace: set[CodeType] = set()
        wrapper_code = dynamo_disable_wrapper_code()
        opened = self._open

        def event(frame: FrameType, event: str, arg: Any) -> None:
            if event == "call":
                code = frame.f_code
                action = actions.get(code, _MISSING)
                if action is _MISSING:
                    action = actions[code] = _action_of(code, wrapper_code,
                                                          defined_in_trace)
                if action is not None:
                    self._call(frame, action)
            elif event == "return" and opened:
                before = opened.pop(frame, None)
                if before is not None:
                    self._compare(frame, *before)

        return event

    def _call(self, frame: FrameType, action: Any) -> None:
        if isinstance(action, _Marked):
            if action.runs(frame):
                self._refuse(frame.f_code.co_qualname, "ember.frontend.disable",
                             frame.f_back)
        elif action is _TORCH_DISABLED:
            callee = dynamo_disabled_callee(frame)
            if callee is not None and not _library_code(callee):
                name = getattr(callee, "__qualname__", None) or type(callee).__name__
                self._refuse(name, "torch.compiler.disable", frame.f_back)
        else:
            assert isinstance(action, _Stores)
            self._open[frame] = (action, _read(frame.f_globals, action.globals),
                                 _read(frame.f_locals, action.cells))

    def _refuse(self, name: str, marked: str, caller: FrameType | None) -> None:
        where = user_source_location(caller) if caller is not None else None
        self.refused = DisabledCallInTrace(
            f"call to {name}, marked {marked} (to run eagerly at every call): the trace "
            "capture runs the function's Python once, at capture, so the call would run "
            "once on fake tensors and never again\n  hint: use the strict capture (the "
            "default), which runs it eagerly at a graph break at every call, or remove "
            "the mark to trace through it", where)
        raise self.refused

    def _compare(self, frame: FrameType, stores: _Stores, globals_before: dict[str, Any],
                 cells_before: dict[str, Any]) -> None:
        code = frame.f_code
        after = _read(frame.f_globals, stores.globals)
        for name, value in globals_before.items():
            if after[name] is not value:
                self.rebound.setdefault((code, "global", name), stores.globals[name])
                if _holds_fake(after[name]):
                    # a fake tensor of the trace left in a global: put the value back
                    self.originals.setdefault((id(frame.f_globals), name),
                                              (frame.f_globals, name, value))
                    self.fakes.append(f"the global {name!r} ({code.co_filename}:"
                                      f"{stores.globals[name]})")
        if cells_before:
            after = _read(frame.f_locals, stores.cells)
            for name, value in cells_before.items():
                if after[name] is not value:
                    self.rebound.setdefault((code, "nonlocal", name), stores.cells[name])
                    if _holds_fake(after[name]):
                        self.fakes.append(f"the nonlocal variable {name!r} ("
                                          f"{code.co_filename}:{stores.cells[name]})")

    def restore(self) -> None:
        """Put back the globals that the trace left holding fake tensors."""
        for namespace, name, value in self.originals.values():
            if value is _MISSING:
                namespace.pop(name, None)
            else:
                namespace[name] = value

    def warn(self) -> None:
        """One :class:`TraceSideEffectWarning` per rebound variable, at its line."""
        for (code, kind, name), line in self.rebound.items():
            text = linecache.getline(code.co_filename, line).strip()
            message = (
                f"{code.co_filename}:{line} in {code.co_qualname}: {text}: the trace "
                f"capture rebinds the {kind} variable {name!r} once, at capture; later "
                "calls run the recorded graph only and do not change it (trace mode "
                "cannot replay Python side effects)\n  hint: use the strict capture (the "
                "default), which replays the write at every call, or keep the value in "
                "a tensor")
            log("fallbacks", message)
            warnings.warn_explicit(message, TraceSideEffectWarning, code.co_filename, line)


def module_attributes(module: Any) -> dict[tuple[str, str], Any]:
    """The plain attributes (instance ``__dict__``, not parameters, buffers or
    submodules) of ``module`` and its submodules, by (qualified name, attribute), for
    :func:`warn_rebound_attributes`; empty when ``module`` is None."""
    if module is None:
        return {}
    return {(prefix, k): v for prefix, sub in module.named_modules()
            for k, v in vars(sub).items() if not k.startswith("_")}


def restore_fake_attributes(module: Any, before: dict[tuple[str, str], Any]) -> list[str]:
    """Attributes of the compiled module (or a submodule) the trace left holding one of
    its fake tensors (``self.cache = self.cache + x``), put back to their values before
    it; their names (``self.cache``)."""
    if not before:
        return []
    modules = dict(module.named_modules())
    names = []
    for (prefix, name), value in module_attributes(module).items():
        old = before.get((prefix, name), _MISSING)
        if old is not value and _holds_fake(value):
            owner: dict[str, Any] = modules[prefix].__dict__
            if old is _MISSING:
                owner.pop(name, None)
            else:
                owner[name] = old
            names.append(f"self.{prefix + '.' if prefix else ''}{name}")
    return names


def _holds_fake(value: Any) -> bool:
    if is_fake(value):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_fake(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_fake(v) for v in value.values())
    return False


def warn_rebound_attributes(module: Any, before: dict[tuple[str, str], Any]) -> None:
    """One :class:`TraceSideEffectWarning` per attribute of the compiled module (or a
    submodule) the trace rebound (``self.step += 1``), at ``forward``'s ``def`` line."""
    if not before:
        return
    after = module_attributes(module)
    changed = [f"self.{prefix + '.' if prefix else ''}{name}"
               for (prefix, name), value in after.items()
               if before.get((prefix, name), _MISSING) is not value]
    if not changed:
        return
    code = getattr(getattr(type(module), "forward", None), "__code__", None)
    filename = code.co_filename if code is not None else "<unknown>"
    line = code.co_firstlineno if code is not None else 0
    message = (f"{filename}:{line}: the trace capture changed {', '.join(changed)} once, at "
               "capture; later calls run the recorded graph only and do not change it "
               "(trace mode cannot replay Python side effects)\n  hint: use the strict "
               "capture (the default), which replays the write at every call, or keep the "
               "value in a buffer")
    log("fallbacks", message)
    warnings.warn_explicit(message, TraceSideEffectWarning, filename, line)


@contextlib.contextmanager
def watched_python() -> Iterator[PythonWatch]:
    """Watch the Python run inside the block (this thread): refuse disabled calls,
    note rebound globals and nonlocals (see the module docstring)."""
    watch = PythonWatch()
    if sys.getprofile() is not None:
        log("fallbacks", "trace capture: a profile function is installed (a profiler or "
                         "debugger); calls of disabled functions and writes to globals "
                         "and nonlocals are not checked in this trace")
        yield watch
        return
    sys.setprofile(watch.hook())
    try:
        yield watch
    finally:
        sys.setprofile(None)


def _library_code(callee: Any) -> bool:
    """torch's (and Ember's) own functions under ``torch.compiler.disable`` (a dispatch
    mode's ``__torch_dispatch__``) are traced as other library code, as in strict
    capture (``escape.is_disabled``)."""
    target = getattr(callee, "__func__", callee)
    code = getattr(target, "__code__", None)
    if isinstance(code, CodeType):
        return is_library_file(code.co_filename)
    module = getattr(target, "__module__", None) or ""
    return bool(module.partition(".")[0] in ("torch", "ember"))


_TORCH_DISABLED = object()  # the code of torch.compiler.disable's wrapper


@dataclass(frozen=True)
class _Marked:
    """The functions marked by ``ember.frontend.disable`` that run one code object."""

    functions: list[FunctionType]

    def runs(self, frame: FrameType) -> bool:
        """Whether ``frame`` (just started) runs one of them: the same globals and the
        same closure contents (read before the frame copied them)."""
        free = frame.f_code.co_freevars
        values = [frame.f_locals.get(n, _MISSING) for n in free] if free else []
        for f in self.functions:
            if f.__globals__ is frame.f_globals and all(
                    v is _cell_value(c) for v, c in zip(values, f.__closure__ or ())):
                return True
        return False


def _cell_value(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # empty
        return _MISSING


def _action_of(code: CodeType, wrapper_code: CodeType | None,
               defined_in_trace: set[CodeType]) -> Any:
    """What a call of ``code`` asks of the watch: a refusal, its variables to compare
    at its return (:class:`_Stores`), or nothing (None)."""
    from ember.frontend.bytecode.escape import disabled_functions

    marked = disabled_functions(code)
    if marked:
        return _Marked(marked)
    if code is wrapper_code:
        return _TORCH_DISABLED
    return _stores_of(code, defined_in_trace)


def _read(namespace: dict[str, Any], names: dict[str, int]) -> dict[str, Any]:
    return {n: namespace.get(n, _MISSING) for n in names}


def _stores_of(code: CodeType, defined_in_trace: set[CodeType]) -> _Stores | None:
    """The globals and free variables ``code`` rebinds, or None when it rebinds none or
    is not watched: library code, installed packages (site-packages: their lazy
    initialisations run during a first trace). Free variables of a function defined by
    code that ran in this trace (a comprehension's walrus, a local helper) are cells of
    a frame of this call, not state kept between calls. Records the functions ``code``
    defines in ``defined_in_trace``."""
    path = code.co_filename
    if is_library_file(path) or "site-packages" in path or "dist-packages" in path:
        return None
    defined_in_trace.update(c for c in code.co_consts if isinstance(c, CodeType))
    own_cells = code not in defined_in_trace
    globals_: dict[str, int] = {}
    cells: dict[str, int] = {}
    line = code.co_firstlineno
    for ins in dis.get_instructions(code):
        if ins.positions is not None and ins.positions.lineno is not None:
            line = ins.positions.lineno
        if ins.opname in _GLOBAL_STORES:
            globals_.setdefault(ins.argval, line)
        elif own_cells and ins.opname in _CELL_STORES and ins.argval in code.co_freevars:
            cells.setdefault(ins.argval, line)
    return _Stores(globals_, cells) if globals_ or cells else None
