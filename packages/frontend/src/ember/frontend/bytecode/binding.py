"""Binding call arguments to a Python function's parameters, as CPython does.

:func:`bind_arguments` reads the parameters from the function's code object
(``co_argcount``, ``co_posonlyargcount``, ``co_kwonlyargcount``, the ``*args`` and
``**kwargs`` flags) and its current ``__defaults__`` / ``__kwdefaults__``, and returns the
frame's initial locals by their local names. It does not use ``inspect.signature``: a
``__signature__`` attribute, ``functools.wraps`` or a signature cached at the first call
could differ from what the interpreter of CPython does.

The rules, in CPython's order:

1. Positional arguments fill the positional parameters (positional-only first); the rest
   go to ``*args``, or the call fails (too many positional arguments).
2. Each keyword argument names a positional-or-keyword or keyword-only parameter (set
   twice: fails); a positional-only name or an unknown name goes to ``**kwargs``, or the
   call fails. Keywords must be strings.
3. Missing positional parameters take the last ``len(__defaults__)`` defaults; missing
   keyword-only ones take ``__kwdefaults__``; any other missing parameter fails.

A failing call raises :class:`BindError`; the caller then lets Python make the call, so
the user sees CPython's own ``TypeError`` message.
"""

from __future__ import annotations

import inspect
import types
from dataclasses import dataclass, field
from typing import Any


class BindError(TypeError):
    """The arguments do not fit the function's parameters (CPython raises a TypeError
    for this call)."""


@dataclass
class Bound:
    """The initial locals of a call (``values``, in ``co_varnames`` order) and which
    parameters took their default (``defaults``: name -> index into ``__defaults__``,
    or the name itself for a ``__kwdefaults__`` entry)."""

    values: dict[str, Any]
    defaults: dict[str, int | str] = field(default_factory=dict)


def bind_arguments(fn: types.FunctionType, args: tuple[Any, ...] | list[Any],
                   kwargs: dict[Any, Any]) -> Bound:
    """Bind ``fn(*args, **kwargs)`` the way CPython does; see the module docstring.

    Raises:
        BindError: the call would raise a TypeError in CPython.
    """
    code = fn.__code__
    name = code.co_name
    n_pos, n_posonly, n_kwonly = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    has_varargs = bool(code.co_flags & inspect.CO_VARARGS)
    has_varkw = bool(code.co_flags & inspect.CO_VARKEYWORDS)
    names = code.co_varnames
    pos_names = names[:n_pos]
    kwonly_names = names[n_pos:n_pos + n_kwonly]
    values: dict[str, Any] = {}

    if len(args) > n_pos and not has_varargs:
        raise BindError(f"{name}() takes {n_pos} positional arguments but {len(args)} "
                        "were given")
    for param, value in zip(pos_names, args):
        values[param] = value
    extra_kw: dict[str, Any] = {}
    keyword_params = set(pos_names[n_posonly:]) | set(kwonly_names)
    for key, value in kwargs.items():
        if not isinstance(key, str):
            raise BindError(f"{name}() keywords must be strings")
        if key in keyword_params:
            if key in values:
                raise BindError(f"{name}() got multiple values for argument {key!r}")
            values[key] = value
        elif has_varkw:
            extra_kw[key] = value
        elif key in pos_names:
            raise BindError(f"{name}() got a positional-only argument passed as keyword: "
                            f"{key!r}")
        else:
            raise BindError(f"{name}() got an unexpected keyword argument {key!r}")

    used_defaults: dict[str, int | str] = {}
    defaults = fn.__defaults__ or ()
    first_default = n_pos - len(defaults)
    for i, param in enumerate(pos_names):
        if param not in values:
            if i < first_default:
                raise BindError(f"{name}() missing required positional argument {param!r}")
            values[param] = defaults[i - first_default]
            used_defaults[param] = i - first_default
    kwdefaults = fn.__kwdefaults__ or {}
    for param in kwonly_names:
        if param not in values:
            if param not in kwdefaults:
                raise BindError(f"{name}() missing required keyword-only argument "
                                f"{param!r}")
            values[param] = kwdefaults[param]
            used_defaults[param] = param

    ordered = {param: values[param] for param in names[:n_pos + n_kwonly]}
    i = n_pos + n_kwonly
    if has_varargs:
        ordered[names[i]] = tuple(args[n_pos:])
        i += 1
    if has_varkw:
        ordered[names[i]] = extra_kw
    return Bound(ordered, used_defaults)
