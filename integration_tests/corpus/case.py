"""A corpus case: how to build the program and make fresh random inputs for it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CorpusCase:
    """``build()`` returns a fresh function or ``nn.Module`` (modules: random weights, in
    the mode the case is about); ``inputs()`` returns ``(args, kwargs)`` with fresh random
    values (never zeros). ``random``: the program draws random numbers, so every run is
    preceded by ``torch.manual_seed``."""

    name: str
    build: Callable[[], Callable[..., Any]]
    inputs: Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]
    random: bool = False
    tags: tuple[str, ...] = field(default_factory=tuple)


CASES: list[CorpusCase] = []


def case(
    name: str,
    inputs: Callable[[], tuple[Any, ...] | tuple[tuple[Any, ...], dict[str, Any]]],
    random: bool = False,
    kwargs: bool = False,
) -> Callable[[Callable[[], Callable[..., Any]]], Callable[[], Callable[..., Any]]]:
    """Register the decorated builder as case ``name``. ``inputs()`` returns the
    positional arguments, or ``(args, kwargs)`` when ``kwargs=True``."""

    def make_inputs() -> tuple[tuple[Any, ...], dict[str, Any]]:
        made = inputs()
        if kwargs:
            args, kw = made
            return tuple(args), dict(kw)
        return tuple(made), {}

    def register(build: Callable[[], Callable[..., Any]]) -> Callable[[], Callable[..., Any]]:
        if any(c.name == name for c in CASES):
            raise ValueError(f"corpus case {name!r} registered twice")
        CASES.append(CorpusCase(name, build, make_inputs, random))
        return build

    return register
