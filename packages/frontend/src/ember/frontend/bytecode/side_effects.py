"""Records of the Python side effects strict capture makes on outside objects.

The interpreter does not change an object from outside the captured code while it
captures: it records the write, reads it back from the record for the rest of the
capture, and the write is replayed on the real object after the graph runs
(:class:`~.state.Replay`). Lists and dicts are mutated through shadow copies instead
(:class:`~.capture.Shadow`).
"""

from __future__ import annotations

import types
from typing import Any, NamedTuple

from ember.frontend.bytecode.frame import _Marker

__all__ = ["DELETED", "AttrWrite", "CellWrite", "GlobalWrite"]

DELETED = _Marker("DELETED")
"""The value of an attribute deleted during the capture (an :class:`AttrWrite`)."""


class AttrWrite(NamedTuple):
    """``setattr(obj, name, value)`` on an outside object (``value`` is
    ``DELETED`` for a delete); ``raw`` when it was made inside the class's
    ``__setattr__``/``__delattr__`` (replayed with ``object.__setattr__``)."""

    obj: Any
    name: str
    value: Any
    raw: bool = False


class GlobalWrite(NamedTuple):
    """``globals[name] = value`` on the real globals dict of a captured function."""

    globals: dict[str, Any]
    name: str
    value: Any


class CellWrite(NamedTuple):
    """``cell.cell_contents = value`` on a cell from outside the capture."""

    cell: types.CellType
    value: Any
