"""Exception tables (3.11+) and which exceptions the captured program may handle.

:func:`find_handler` says where an exception raised at an instruction is handled. Both
interpreters use it: the concrete one routes real exceptions, the symbolic one routes the
program's own exceptions to the innermost inlined frame that handles them
(:mod:`.exception_ops`).

While capturing, not every exception is the program's: Ember's graph breaks and internal
errors, and the limits of fake tensors, must never reach a user ``except`` clause (they
would not happen eagerly). :func:`capture_limitation` decides, by the rules of
:data:`LIMITATION_RULES`.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ember.frontend._torch import fake_tensor_limitation_types
from ember.frontend.bytecode.opcodes import decode


@dataclass(frozen=True)
class HandlerEntry:
    """Instructions with offsets in ``[start, end)`` are handled at ``target``; the stack
    is cut to ``depth`` first and, if ``lasti``, the raising offset is pushed."""

    start: int
    end: int
    target: int
    depth: int
    lasti: bool


def _varints(data: bytes) -> Iterator[tuple[int, bool]]:
    it = iter(data)
    for b in it:
        start = bool(b & 128)
        value = b & 63
        while b & 64:
            b = next(it)
            value = (value << 6) | (b & 63)
        yield value, start


_TABLES: dict[types.CodeType, list[HandlerEntry]] = {}


def exception_table(code: types.CodeType) -> list[HandlerEntry]:
    """The parsed ``co_exceptiontable`` of ``code`` (memoised)."""
    known = _TABLES.get(code)
    if known is not None:
        return known
    values = [v for v, _ in _varints(code.co_exceptiontable)]
    entries = []
    for i in range(0, len(values) - 3, 4):
        start, length, target, depth_lasti = values[i:i + 4]
        entries.append(HandlerEntry(start * 2, start * 2 + length * 2, target * 2,
                                    depth_lasti >> 1, bool(depth_lasti & 1)))
    _TABLES[code] = entries
    return entries


def find_handler(code: types.CodeType, offset: int) -> HandlerEntry | None:
    """The innermost handler covering the instruction at ``offset``, or None."""
    for entry in exception_table(code):
        if entry.start <= offset < entry.end:
            return entry
    return None


# ---- which exceptions the program handles while capturing ---------------------------

# Instructions through which an exception raised by *other* code (a C function, an
# operator, a user ``__getitem__`` run for real) reaches Ember's frame.
_CALL_OPS = frozenset({"CALL", "CALL_FUNCTION_EX", "PRECALL", "CALL_KW"})


def _innermost(exc: BaseException) -> types.TracebackType | None:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def _module_of_frame(tb: types.TracebackType) -> str:
    name = tb.tb_frame.f_globals.get("__name__", "")
    return name if isinstance(name, str) else ""


def _is_ember_exception(exc: BaseException) -> bool:
    # GraphBreak, FullGraphError, Unrebuildable, ...: every class Ember defines
    return any((k.__module__ or "").startswith("ember.") for k in type(exc).__mro__)


def _is_fake_tensor_limitation(exc: BaseException) -> bool:
    return isinstance(exc, fake_tensor_limitation_types())


def _raised_in_fake_tensor_code(exc: BaseException) -> bool:
    # an op that works on real tensors can fail on fake ones (a missing meta kernel)
    tb = exc.__traceback__
    while tb is not None:
        if _module_of_frame(tb).startswith(("torch._subclasses", "torch._prims_common")):
            return True
        tb = tb.tb_next
    return False


def _raised_by_ember_code(exc: BaseException) -> bool:
    """Ember's own code raised ``exc``: not through a call into other code, and not by
    an explicit ``raise`` (which the opcode handlers use to raise CPython's errors for
    the program: ``UnboundLocalError``, ``NameError``, unpacking's ``ValueError``),
    except an ``assert``."""
    tb = _innermost(exc)
    if tb is None or not _module_of_frame(tb).startswith("ember."):
        return False
    raising = next((ins for ins in decode(tb.tb_frame.f_code) if ins.offset == tb.tb_lasti),
                   None)
    if raising is None:
        return True
    if raising.opname in _CALL_OPS:
        return False
    return raising.opname != "RAISE_VARARGS" or isinstance(exc, AssertionError)


LIMITATION_RULES: tuple[tuple[str, Callable[[BaseException], bool]], ...] = (
    ("an exception of Ember's own", _is_ember_exception),
    ("a fake-tensor limitation", _is_fake_tensor_limitation),
    ("raised by torch's fake-tensor code", _raised_in_fake_tensor_code),
    ("an internal error of Ember", _raised_by_ember_code),
)
"""``(why, test)`` pairs: an exception raised while capturing that passes a test is no
exception of the program's; it stays a graph break (the code then runs eagerly)."""


def capture_limitation(exc: BaseException) -> str | None:
    """Why ``exc``, raised while an instruction was interpreted symbolically, must not
    reach the program's handlers (a :data:`LIMITATION_RULES` entry), or None when it is
    the program's own exception (a ``KeyError`` of a dict lookup, a ``raise``).

    Exceptions the program raises itself (``raise``, re-raise) are never tested: they
    are the program's by construction.
    """
    for why, test in LIMITATION_RULES:
        if test(exc):
            return why
    return None
