"""Callables that are not Python functions, given to the strict capture.

``ember.frontend.compile(torch.sin)`` (a builtin), ``compile(F.logsigmoid)``, or an
object with a ``__call__`` method has no bytecode of its own to interpret. The strict
capture interprets a one-line Python function in its place,
``def sin(*args, **kwargs): return fn(*args, **kwargs)``, so the call is recorded (a
torch op), inlined (a Python ``__call__``) or breaks the graph, as in any function.
"""

from __future__ import annotations

import types
from typing import Any, cast

__all__ = ["as_python_function"]


def as_python_function(target: Any) -> types.FunctionType:
    """``target`` itself when it is a Python function, else a Python function calling it.

    Raises:
        TypeError: ``target`` is not callable.
    """
    if isinstance(target, types.FunctionType):
        return target
    if not callable(target):
        raise TypeError(f"strict capture needs a callable (a function or module), got "
                        f"{type(target).__name__}")

    def call(*args: Any, **kwargs: Any) -> Any:
        return target(*args, **kwargs)

    name = getattr(target, "__name__", None) or type(target).__name__
    call.__name__ = call.__qualname__ = str(name)
    return cast(types.FunctionType, call)
