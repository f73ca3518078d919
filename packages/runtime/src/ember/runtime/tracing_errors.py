"""The recorder's error (``ember.runtime.tracing.RecordingError``), in its own module so
that the recorder's parts (:mod:`ember.runtime.tracing_symbolic`) can raise it."""

from __future__ import annotations


class RecordingError(RuntimeError):
    """An op or value the recorder cannot represent in the IR; the message names it."""


class SymbolicValueError(RecordingError):
    """A symbolic value the IR cannot hold: a ``SymFloat`` or ``SymBool`` (a size used
    as a float, ``n ** -0.5``), or a ``SymInt`` outside a dynamic recorder."""
