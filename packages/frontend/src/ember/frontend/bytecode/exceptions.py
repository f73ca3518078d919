"""Exception tables (3.11+): where an exception raised at an instruction is handled.

The concrete interpreter uses them to run ``try``/``except``/``with`` cleanup code the
way CPython does; the symbolic interpreter never raises into a handler (an exception
during capture is a graph break, and the breaking instruction then runs concretely).
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from dataclasses import dataclass


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
