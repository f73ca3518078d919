"""A capture's error that keeps the kind of the exception the user's code raised.

The trace capture runs the user's function on fake tensors; an exception its code raises
there (``x[5]`` past the end: ``IndexError``; a ``ValueError`` of the user's own check)
is reported as a :class:`~ember.frontend.trace.CaptureError` naming the user's line. A
plain ``CaptureError`` (a ``RuntimeError``) slipped past the user's ``except IndexError``,
which eager's call would have met. :func:`with_kind` gives a class that is both: the
capture's error and the user's exception's built-in kind.
"""

from __future__ import annotations

from typing import TypeVar, cast

E = TypeVar("E", bound=RuntimeError)

_CLASSES: dict[tuple[type, type], type] = {}


def with_kind(base: type[E], error: BaseException) -> type[E]:
    """``base``, or a subclass of ``base`` and of ``type(error)`` when that is a built-in
    exception other than a ``RuntimeError`` whose layout allows it (``IndexError``,
    ``ValueError``, ``TypeError``, ``KeyError``, ``AssertionError``, ...)."""
    kind = type(error)
    if (isinstance(error, RuntimeError) or not isinstance(error, Exception)
            or kind.__module__ != "builtins"):
        return base
    found = _CLASSES.get((base, kind))
    if found is None:
        try:
            # NOTE: BaseException's __str__: KeyError's own would quote the message
            found = type(f"{base.__name__}_{kind.__name__}", (base, kind),
                         {"__module__": base.__module__, "__str__": BaseException.__str__})
        except TypeError:  # a kind with fields of its own (AttributeError, OSError)
            found = base
        _CLASSES[(base, kind)] = found
    return cast("type[E]", found)
