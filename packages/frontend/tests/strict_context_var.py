"""A helper module for ``test_strict_side_effects``: a context-variable-like global
object, reached from compiled code only through an inlined function's own globals
(without a source), as transformers' ``CompileableContextVar`` is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Var:
    def __init__(self) -> None:
        self.value: Any = None
        self.active = False

    def set(self, value: Any) -> None:
        self.value = value
        self.active = True

    def get(self) -> Any:
        return self.value if self.active else None

    def reset(self) -> None:
        self.value = None
        self.active = False


VAR = Var()


def with_scale(scale: float) -> Callable[[Any], Any]:
    """Decorates ``forward(self, x)``: ``VAR`` holds ``scale`` while it runs."""

    def decorate(fn: Any) -> Any:
        def wrapper(self: Any, x: Any) -> Any:
            VAR.set(scale)
            try:
                return fn(self, x)
            finally:
                VAR.reset()

        return wrapper

    return decorate


def current_scale() -> Any:
    return VAR.get()
