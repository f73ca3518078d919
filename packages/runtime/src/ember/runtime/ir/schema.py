"""The schema version of ``program.json``, its upgraders and the producer stamp.

Versioning rule (docs/ir-contract.md): a new *minor* only adds to the format, and a reader
upgrades an older minor step by step through :data:`UPGRADERS`; a new *major* is a
break, and a reader refuses a major it does not know.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Callable

from ember.runtime.ir.errors import IRFormatError

SCHEMA_VERSION: tuple[int, int] = (1, 3)
"""The ``(major, minor)`` schema version this code writes.

History: 1.0 the first format; 1.1 adds ``manifest.json`` (the SHA-256 of every member)
to the container; ``program.json`` is unchanged; 1.2 adds symbolic shapes: a symbol's
``hint``, a graph's ``guards``, ``{"sym": ...}`` arguments and a scalar meta's
``symbol`` (the unbacked symbol an ``int`` result binds) (all optional); 1.3 lets a
symbol be unbounded below (``lower`` the least int64, ``UNBOUNDED_LOWER``: an ``.item()``
used as a number) and adds an aliased output's optional ``dtype`` to the aot
metadata."""

JSONDoc = dict[str, object]

UPGRADERS: dict[tuple[int, int], Callable[[JSONDoc], JSONDoc]] = {}
"""``(major, minor) -> upgrade``: turns a document of schema ``major.minor`` into one of
``major.(minor + 1)`` (the function need not update ``schema_version``; the reader
does). Register each step next to the change."""


def _from_1_0(doc: JSONDoc) -> JSONDoc:
    """1.0 -> 1.1: only the container changed (``manifest.json``)."""
    return doc


UPGRADERS[(1, 0)] = _from_1_0


def _from_1_1(doc: JSONDoc) -> JSONDoc:
    """1.1 -> 1.2: symbolic shapes only add optional keys (hints, guards, sym args)."""
    return doc


UPGRADERS[(1, 1)] = _from_1_1


def _from_1_2(doc: JSONDoc) -> JSONDoc:
    """1.2 -> 1.3: a 1.2 document has no symbol unbounded below and no aliased output
    with a ``dtype``; it reads as it is."""
    return doc


UPGRADERS[(1, 2)] = _from_1_2

_VERSION_RE = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")  # ASCII digits, no leading 0


def format_version(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def parse_version(text: object, where: str) -> tuple[int, int]:
    """``"1.0"`` -> ``(1, 0)``.

    Raises:
        IRFormatError: if ``text`` is not a ``MAJOR.MINOR`` string.
    """
    m = _VERSION_RE.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise IRFormatError(f"{where}: schema version {text!r} is not 'MAJOR.MINOR'")
    return int(m.group(1)), int(m.group(2))


def upgrade(doc: JSONDoc, version: tuple[int, int], producer: str) -> JSONDoc:
    """Bring ``doc`` (of schema ``version``, written by ``producer``) to
    :data:`SCHEMA_VERSION`.

    Raises:
        IRFormatError: for another major, a newer minor, or a missing upgrade step.
    """
    major, minor = version
    current = SCHEMA_VERSION
    if major != current[0]:
        raise IRFormatError(
            f"unsupported schema major version {format_version(version)} (written by "
            f"{producer}); this ember-runtime reads schema {current[0]}.x only"
        )
    if minor > current[1]:
        raise IRFormatError(
            f"schema version {format_version(version)} (written by {producer}) is newer "
            f"than this ember-runtime's {format_version(current)}; upgrade ember-runtime"
        )
    while (major, minor) < current:
        step = UPGRADERS.get((major, minor))
        if step is None:
            raise IRFormatError(f"no upgrader from schema {major}.{minor} to {major}.{minor + 1}")
        doc = step(doc)
        minor += 1
    return doc


def default_producer() -> tuple[str, str]:
    """``("ember-runtime", its installed version)``."""
    try:
        version = importlib.metadata.version("ember-runtime")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return "ember-runtime", version
