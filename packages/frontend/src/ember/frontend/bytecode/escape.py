"""Escape hatches: run a function eagerly (a deliberate graph break), trace a region by
running its Python (non-strict), and allow a named break under ``fullgraph=True``."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ember.frontend._torch import dynamo_disabled_original

F = TypeVar("F", bound=Callable[..., Any])

_DISABLED_ATTR = "__ember_disable__"
_NONSTRICT_ATTR = "__ember_nonstrict__"


def disable(fn: F) -> F:
    """Mark ``fn`` to always run eagerly: a call to it inside a compiled function is a
    graph break (the graph before it runs, then ``fn`` runs in plain Python, then capture
    resumes). Usable as a decorator. Returns ``fn`` itself (marked)."""
    try:
        setattr(fn, _DISABLED_ATTR, True)
        return fn
    except (AttributeError, TypeError):
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        setattr(wrapper, _DISABLED_ATTR, True)
        return wrapper  # type: ignore[return-value]


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
    one of ``reasons`` (e.g. ``allow_break("print")``); other breaks still raise."""
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
