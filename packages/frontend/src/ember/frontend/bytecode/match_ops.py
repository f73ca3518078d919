"""The opcodes of ``match`` statements (CPython 3.11/3.12).

Each one is run as the plain Python it stands for, through the interpreter's own rules,
so a pattern is guarded as that code would be:

================  =========================================================================
opcode            what it does, as Python
================  =========================================================================
GET_LEN           ``len(subject)`` (the ``len`` rule), pushed above the subject
MATCH_MAPPING     ``isinstance(subject, collections.abc.Mapping)``
MATCH_SEQUENCE    ``isinstance(subject, collections.abc.Sequence)`` and not a ``str``,
                  ``bytes`` or ``bytearray`` (CPython's sequence flag)
MATCH_KEYS        for each key: ``key in subject`` (as ``in``), then ``subject[key]``; the
                  values as a tuple, or None when a key is missing
MATCH_CLASS       ``isinstance(subject, cls)``, then the attributes named by
                  ``cls.__match_args__`` (positional patterns) and the keyword patterns,
                  read as ``getattr(subject, name, <missing>)`` (a missing one is guarded
                  to stay missing); the values as a tuple, or None
================  =========================================================================

Before, any of them made the whole function run eagerly (``unsupported bytecode``).
"""

from __future__ import annotations

import collections.abc
import operator
from typing import Any

from ember.frontend.bytecode.frame import Frame
from ember.frontend.bytecode.opcodes import Instruction

# builtins whose one positional pattern matches the subject itself (CPython's
# _Py_TPFLAGS_MATCH_SELF)
_MATCH_SELF = (bool, bytearray, bytes, dict, float, frozenset, int, list, set, str, tuple)


class MatchOps:
    """``match`` statement opcodes; a base of the interpreter (see the module
    docstring). Uses the interpreter's ``calls``, ``load_attr``, ``subscr``, ``apply``
    and ``guard_lookup_fails``."""

    calls: Any
    capture: Any

    def _call_builtin(self, f: Frame, fn: Any, *args: Any) -> Any:
        return self.calls.call(self, f, fn, list(args), {})

    def op_GET_LEN(self, f: Frame, ins: Instruction) -> None:
        f.push(self._call_builtin(f, len, f.stack[-1]))

    def op_MATCH_MAPPING(self, f: Frame, ins: Instruction) -> None:
        f.push(bool(self._call_builtin(f, isinstance, f.stack[-1], collections.abc.Mapping)))

    def op_MATCH_SEQUENCE(self, f: Frame, ins: Instruction) -> None:
        subject = f.stack[-1]
        f.push(bool(self._call_builtin(f, isinstance, subject, collections.abc.Sequence))
               and not self._call_builtin(f, isinstance, subject, (str, bytes, bytearray)))

    def op_MATCH_KEYS(self, f: Frame, ins: Instruction) -> None:
        subject, keys = f.stack[-2], f.stack[-1]
        values: list[Any] = []
        interp: Any = self
        for key in keys:
            if not interp.apply(operator.contains, subject, key):
                f.push(None)
                return
            values.append(interp.subscr(subject, key))
        f.push(tuple(values))

    def op_MATCH_CLASS(self, f: Frame, ins: Instruction) -> None:
        subject, cls, names = f.stack[-3:]
        f.popn(3)
        f.push(self._match_class(f, subject, cls, ins.oparg, names))

    def _match_class(self, f: Frame, subject: Any, cls: Any, count: int,
                     keywords: tuple[str, ...]) -> tuple[Any, ...] | None:
        if not isinstance(cls, type):
            raise TypeError("called match pattern must be a class")
        if not self._call_builtin(f, isinstance, subject, cls):
            return None
        interp: Any = self
        names: list[str] = []
        values: list[Any] = []
        if count:
            match_args = getattr(cls, "__match_args__", None)
            if match_args is None and issubclass(cls, _MATCH_SELF):
                if count > 1:
                    raise TypeError(f"{cls.__name__}() accepts 1 positional sub-pattern "
                                    f"({count} given)")
                values.append(subject)
            else:
                match_args = () if match_args is None else match_args
                if not isinstance(match_args, tuple):
                    raise TypeError(f"{cls.__name__}.__match_args__ must be a tuple (got "
                                    f"{type(match_args).__name__})")
                if count > len(match_args):
                    raise TypeError(f"{cls.__name__}() accepts {len(match_args)} "
                                    f"positional sub-pattern{'s' if len(match_args) != 1 else ''}"
                                    f" ({count} given)")
                names.extend(match_args[:count])
        for name in [*names, *keywords]:
            if names.count(name) + keywords.count(name) > 1:
                raise TypeError(f"{cls.__name__}() got multiple sub-patterns for attribute "
                                f"{name!r}")
            try:
                values.append(interp.load_attr(subject, name))
            except AttributeError:
                interp.guard_lookup_fails(subject, name, attribute=True)
                return None
        return tuple(values)


__all__ = ["MatchOps"]
