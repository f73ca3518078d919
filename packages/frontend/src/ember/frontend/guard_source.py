"""The base of every guard source, and what a source's generated read may use: the
check function's writer (:class:`CodeWriter`) and :func:`index_code`. Shared by
:mod:`ember.frontend.guard_model` and :mod:`ember.frontend.size_guards`."""

from __future__ import annotations

import operator
from typing import Any, Protocol

__all__ = ["CodeWriter", "Source", "index_code"]


class CodeWriter(Protocol):
    """What a guard check and a source's read code may ask of the check function's
    writer (:class:`ember.frontend.guards.MatcherWriter`)."""

    def ref(self, source: Source) -> str:
        """A local of the check function holding ``source``'s value (fetched once)."""
        ...

    def const(self, prefix: str, value: Any) -> str:
        """The name under which ``value`` is a constant of the check function."""
        ...


class Source:
    """Where a guarded value (or graph input) is read from. ``expr()`` renders the read
    for people (logs, messages) and is never executed; ``fetch(S, C)`` performs it
    (``S`` the state the capture mode checks, ``C`` its context); ``fetch_code(w)`` is
    the same read as an expression of the generated check function."""

    def expr(self) -> str:
        raise NotImplementedError

    def fetch(self, state: Any, ctx: Any) -> Any:
        raise NotImplementedError

    def fetch_code(self, w: CodeWriter) -> str:
        """The generated read; by default a call of :meth:`fetch` (no shared prefix)."""
        return f"{w.const('source', self)}.fetch(S, C)"

    def __str__(self) -> str:
        return self.expr()


def index_code(value: Any) -> str:
    """An integer written into generated code (an index, a length): only an ``int``."""
    if type(value) is not int:
        value = operator.index(value)
    return str(int(value))
