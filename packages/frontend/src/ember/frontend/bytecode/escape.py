"""Escape hatches: run a function eagerly (a deliberate graph break), trace a region by
running its Python (non-strict), and allow a named break under ``fullgraph=True``."""

from __future__ import annotations

import contextlib
import functools
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ember.frontend._torch import dynamo_disabled_original

F = TypeVar("F", bound=Callable[..., Any])

_DISABLED_ATTR = "__ember_disable__"
_NONSTRICT_ATTR = "__ember_nonstrict__"
# the functions marked by disable(): the trace capture, which runs the Python itself,
# refuses to start one of them (trace_watch.py)
_DISABLED_FUNCTIONS: weakref.WeakSet[types.FunctionType] = weakref.WeakSet()


def disable(fn: F) -> F:
    """Mark ``fn`` to always run eagerly: a call to it inside a compiled function is a
    graph break (the graph before it runs, then ``fn`` runs in plain Python, then capture
    resumes). Usable as a decorator. Returns ``fn`` itself (marked)."""
    try:
        setattr(fn, _DISABLED_ATTR, True)
    except (AttributeError, TypeError):
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        setattr(wrapper, _DISABLED_ATTR, True)
        _DISABLED_FUNCTIONS.add(wrapper)  # type: ignore[arg-type]
        return wrapper  # type: ignore[return-value]
    function = getattr(fn, "__func__", fn)
    if isinstance(function, types.FunctionType):
        _DISABLED_FUNCTIONS.add(function)
    return fn


def disabled_functions(code: types.CodeType) -> list[types.FunctionType]:
    """The functions marked by :func:`disable` whose code is ``code`` (several
    functions share one code: closures of one ``def``, every ``@contextmanager``
    function's wrapper)."""
    return [f for f in list(_DISABLED_FUNCTIONS) if f.__code__ is code]


def nonstrict(fn: F) -> F:
    """Mark ``fn`` to be traced by running its Python on fake tensors (the tracing
    mode) when a compiled function calls it: its tensor ops join the graph, but the
    Python values it reads are not guarded and its Python side effects happen once, at
    capture. Returns ``fn`` itself (marked)."""
    setattr(fn, _NONSTRICT_ATTR, True)
    return fn


def is_disabled(fn: Any) -> bool:
    """Marked by :func:`disable`, or a user function wrapped by ``torch.compiler.disable``
    (``torch._dynamo.disable``): both run eagerly at a graph break. torch's own
    functions under torch.compiler.disable keep being recorded as other torch code."""
    target = getattr(fn, "__func__", fn)
    if getattr(target, _DISABLED_ATTR, False) is True:
        return True
    original = dynamo_disabled_original(target)
    if original is None:
        return False
    module = getattr(original, "__module__", None) or ""
    return not (module == "torch" or module.startswith("torch."))


def is_nonstrict(fn: Any) -> bool:
    target = getattr(fn, "__func__", fn)
    return getattr(target, _NONSTRICT_ATTR, False) is True


_allowed = threading.local()


@contextlib.contextmanager
def allow_break(*reasons: str) -> Iterator[None]:
    """Within this block, ``fullgraph=True`` accepts graph breaks whose reason contains
    one of ``reasons`` (e.g. ``allow_break("print")``); other breaks still raise.

    Raises:
        ValueError: no reason, or one that is no non-empty string (``""`` is a part of
            every reason: it would turn ``fullgraph=True`` off).
    """
    if not reasons or not all(isinstance(r, str) and r for r in reasons):
        raise ValueError(f"allow_break{reasons!r}: expected one or more break reasons, "
                         "each a non-empty string (a part of the reason, e.g. 'print')")
    previous = getattr(_allowed, "reasons", ())
    _allowed.reasons = previous + tuple(reasons)
    try:
        yield
    finally:
        _allowed.reasons = previous


def break_allowed(reason: str, extra: tuple[str, ...] = ()) -> bool:
    """Whether a break with ``reason`` is allowed under fullgraph=True."""
    allowed = tuple(getattr(_allowed, "reasons", ())) + tuple(extra)
    return any(a in reason for a in allowed)
