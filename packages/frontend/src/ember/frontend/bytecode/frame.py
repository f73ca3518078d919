"""The interpreter's frame: the value stack, locals and cells of one code object.

Values are ordinary Python objects. While capturing, tensors are the recorder's fake
tensors and outside lists/dicts are shadow copies (:mod:`.capture`); in concrete mode they
are the real values. ``NULL`` is the stack marker CPython pushes before a callable
(``PUSH_NULL``, ``LOAD_GLOBAL`` with the low bit set); ``UNBOUND`` marks a local cleared
by ``LOAD_FAST_AND_CLEAR`` (3.12).
"""

from __future__ import annotations

import linecache
import types
from dataclasses import dataclass, field
from typing import Any

from ember.frontend.bytecode.opcodes import Instruction, decode
from ember.frontend.bytecode.sources import Source
from ember.runtime.ir import SourceLocation


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NULL = _Marker("NULL")
UNBOUND = _Marker("UNBOUND")


@dataclass
class FrameState:
    """A frame's data at an instruction boundary: what a segment starts from and what
    the runtime rebuilds after running a graph."""

    ip: int
    stack: list[Any]
    locals: dict[str, Any]
    cells: dict[str, Any]
    grad_enabled: bool
    # exceptions being handled (``except``/``finally`` blocks entered), innermost last
    exc_stack: list[Any] = field(default_factory=list)


@dataclass
class Frame:
    """One code object being interpreted. ``fn_source`` is where the function object came
    from (for guards on its closure); ``parent`` the calling frame when inlined."""

    code: types.CodeType
    f_globals: dict[str, Any]
    f_builtins: dict[str, Any]
    locals: dict[str, Any]
    closure: tuple[Any, ...] = ()
    fn_source: Source | None = None
    parent: Frame | None = None
    stack: list[Any] = field(default_factory=list)
    cells: dict[str, Any] = field(default_factory=dict)
    ip: int = 0
    kw_names: tuple[str, ...] = ()
    returned: bool = False
    return_value: Any = None
    last_line: int | None = None
    exc_stack: list[Any] = field(default_factory=list)  # exceptions being handled
    yielded: list[Any] | None = None  # values yielded, when running a generator
    class_namespace: Any = None  # the namespace of a class body (.class_ops)

    @property
    def instructions(self) -> list[Instruction]:
        return decode(self.code)

    @property
    def depth(self) -> int:
        return 0 if self.parent is None else 1 + self.parent.depth

    def current(self) -> Instruction:
        """The instruction being run (``ip`` was already advanced past it)."""
        return self.instructions[max(self.ip - 1, 0)]

    def push(self, v: Any) -> None:
        self.stack.append(v)

    def pop(self) -> Any:
        return self.stack.pop()

    def popn(self, n: int) -> list[Any]:
        if n == 0:
            return []
        vals = self.stack[-n:]
        del self.stack[-n:]
        return vals

    def snapshot(self, grad_enabled: bool) -> FrameState:
        return FrameState(self.ip, list(self.stack), dict(self.locals), dict(self.cells),
                          grad_enabled, list(self.exc_stack))


def location_of(frame: Frame, line: int | None) -> SourceLocation:
    """The user source line ``line`` of ``frame``'s code (with its text)."""
    file = frame.code.co_filename
    text = linecache.getline(file, line).strip() if line else ""
    return SourceLocation(file, line or 0, frame.code.co_name, text)
