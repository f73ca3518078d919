"""The user's message on the shape error of a failed ``assert`` over data-dependent sizes.

An ``assert`` whose condition is an unbacked symbolic bool (``assert n < 2, "too
many"`` after ``n = t.sum().item()`` in a symbolic capture) becomes ``torch._check``
(:mod:`.tensor_asserts`): a fact of the shape environment that narrows the symbol's
range or becomes a guard of the graph, which the runtime checks when the graph binds
the symbol, raising :class:`~ember.runtime.ir.symbolic.ShapeError` (``size 2 is outside
the range [0, 1] of symbol u0``) that says nothing of the assert. So the capture keeps
each such assert's relation over the graph's symbols (:class:`SymbolicAssert`), and
when a segment's graph raises a ``ShapeError``, the asserts whose relation is false
for the values the error names are added to its message (:func:`name_failed_asserts`):
``...; assertion failed: too many (at f.py:12 in fn: assert n < 2, "too many")``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ember.runtime.ir import SourceLocation, symbolic
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.symbolic import ShapeError
from ember.runtime.tracing_errors import RecordingError

__all__ = ["SymbolicAssert", "name_failed_asserts", "note_symbolic_assert"]


@dataclass(frozen=True)
class SymbolicAssert:
    """An ``assert`` recorded as a symbolic check: its ``relation`` (IR text over the
    graph's symbols), the user's ``message`` (None when it has none, or one computed
    at run time) and where it is."""

    relation: str
    message: str | None
    location: SourceLocation

    def describe(self) -> str:
        where = f"{self.location}: {self.location.text}" if self.location.text else str(
            self.location)
        if self.message is None:
            return f"assertion failed at {where}"
        return f"assertion failed: {self.message} (at {where})"


def note_symbolic_assert(interp: Any, condition: Any, message: str | None,
                         location: SourceLocation) -> None:
    """Keep the assert of ``condition`` (a ``torch.SymBool`` of the capture's shape
    environment) in ``interp.symbolic_asserts``; one whose relation has no IR form is
    not kept (its failure keeps the runtime's message)."""
    symbols = interp.capture.recorder.symbols
    if symbols is None:
        return
    try:
        relation = symbolic.format_relation(symbols.to_ir(condition.node.expr, "an assert"))
    except (RecordingError, IRFormatError):
        return
    interp.symbolic_asserts.append(SymbolicAssert(relation, message, location))


def name_failed_asserts(error: ShapeError, asserts: Sequence[SymbolicAssert]) -> None:
    """Add to ``error``'s message each assert of ``asserts`` that is false for the
    symbol values the error names (an assert over other symbols too is not judged)."""
    failed = []
    for a in asserts:
        names = symbolic.relation_symbols(a.relation)
        if names and names <= error.values.keys() and not symbolic.holds(a.relation,
                                                                         error.values):
            failed.append(a.describe())
    if failed:
        error.args = (f"{error.args[0] if error.args else ''}; {'; '.join(failed)}",
                      *error.args[1:])
