"""Reads of the process environment during capture: guarded constants.

``os.environ[k]``, ``os.environ.get(k, d)``, ``k in os.environ``, ``os.getenv(k, d)``
(and ``os.environ.__getitem__`` / ``__contains__`` / ``get`` called directly) read the
variable for real at capture time, and guard its value: an ``equals`` guard on
:class:`EnvSource` (``os.environ.get('K') == '1'``, or ``== None`` when it is unset;
shown under ``EMBER_LOGS=guards``). Setting, changing or unsetting the variable between
calls makes the guard fail, so the function is captured again. No ``KeyError`` is raised
and caught inside the interpreter for an unset variable read with a default.

Writes (``os.environ[k] = v``, ``os.putenv``) are not reads: they break like any other
item assignment on an object Ember does not track.

The table: ``ENVIRON_METHODS[name] = rule`` for the methods of ``os.environ`` (found by
the bound method's name, since ``os.environ.get`` is a new bound method at each read),
and ``ENV_FUNCTIONS[fn] = rule`` for module functions (added to the builtin rules).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ember.frontend.bytecode.frame import Frame
from ember.frontend.bytecode.sources import Source

Rule = Callable[[Any, Any, Frame, list[Any], dict[str, Any]], Any]  # as builtin_rules

_MISSING = object()


@dataclass(frozen=True)
class EnvSource(Source):
    """The value of environment variable ``key``, or None when it is unset."""

    key: str

    def expr(self) -> str:
        return f"os.environ.get({self.key!r})"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return os.environ.get(self.key)


def is_environ(obj: Any) -> bool:
    """Whether ``obj`` is the process environment mapping (``os.environ``)."""
    return obj is os.environ or isinstance(obj, type(os.environ))


def read_env(interp: Any, key: Any) -> str | None:
    """The value of variable ``key`` now (None: unset), guarded when capturing."""
    if not isinstance(key, str):
        raise TypeError(f"str expected, not {type(key).__name__}")
    value = os.environ.get(key)
    if interp.capture is not None:
        interp.capture.guard("equals", EnvSource(key), value)
    return value


def environ_getitem(interp: Any, key: Any) -> str:
    """``os.environ[key]``: KeyError when unset (raised like CPython's)."""
    value = read_env(interp, key)
    if value is None:
        raise KeyError(key)
    return value


def environ_contains(interp: Any, key: Any) -> bool:
    """``key in os.environ`` (a non-str key is never in it)."""
    if not isinstance(key, str):
        return False
    return read_env(interp, key) is not None


def _get(h: Any, interp: Any, frame: Frame, args: list[Any], kwargs: dict[str, Any]) -> Any:
    key, default = _key_and_default(args, kwargs, "default")
    value = read_env(interp, key)
    return default if value is None else value


def _getitem(h: Any, interp: Any, frame: Frame, args: list[Any],
             kwargs: dict[str, Any]) -> Any:
    return environ_getitem(interp, args[0])


def _contains(h: Any, interp: Any, frame: Frame, args: list[Any],
              kwargs: dict[str, Any]) -> Any:
    return environ_contains(interp, args[0])


def _getenv(h: Any, interp: Any, frame: Frame, args: list[Any],
            kwargs: dict[str, Any]) -> Any:
    key, default = _key_and_default(args, kwargs, "default")
    value = read_env(interp, key)
    return default if value is None else value


def _key_and_default(args: list[Any], kwargs: dict[str, Any], name: str) -> tuple[Any, Any]:
    if not args and "key" not in kwargs:
        raise TypeError("missing the variable name")
    key = args[0] if args else kwargs["key"]
    default = args[1] if len(args) > 1 else kwargs.get(name)
    return key, default


ENVIRON_METHODS: dict[str, Rule] = {
    "get": _get,
    "__getitem__": _getitem,
    "__contains__": _contains,
}
ENV_FUNCTIONS: dict[Callable[..., Any], Rule] = {os.getenv: _getenv}  # builtin rules


def _whole_environment(h: Any, interp: Any, frame: Frame, args: list[Any],
                       kwargs: dict[str, Any]) -> Any:
    raise interp.fail("reading or changing the whole process environment (os.environ "
                      "methods other than get, [] and in)", _WHOLE_HINT)


_WHOLE_HINT = ("read single variables with os.environ.get, or do it outside the compiled "
               "function")


def refuse_whole_environment(interp: Any, fn: Any, args: list[Any]) -> None:
    """Builtins that read every variable (``dict(os.environ)``, ``list``, ``sorted``,
    ``len``, ...) break instead of making the environment a constant."""
    if interp.capture is not None and any(is_environ(a) for a in args):
        raise interp.fail(f"{getattr(fn, '__name__', fn)}() of the whole process "
                          "environment", _WHOLE_HINT)


def environ_rule(fn: Any) -> Rule | None:
    """The rule for ``fn`` when it is a method bound to ``os.environ``: a guarded read
    from :data:`ENVIRON_METHODS`, else a break (``copy``, ``items``, ``setdefault``,
    ... would read or change every variable unguarded)."""
    owner = getattr(fn, "__self__", _MISSING)
    if owner is _MISSING or not is_environ(owner):
        return None
    name = getattr(fn, "__name__", "")
    rule: Rule = ENVIRON_METHODS.get(str(name), _whole_environment)
    return rule
