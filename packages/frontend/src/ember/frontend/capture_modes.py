"""The registry of capture modes: ``options={"capture": name}`` picks one.

A capture mode is a factory ``(CompileRequest) -> compiled callable``; the callable is
called like the user's function and has ``.stats`` (a :class:`CompileStats`) and
``.reset()``. ``"strict"`` (symbolic bytecode interpretation, ``ember.frontend.bytecode``)
is the default; ``"trace"`` (run the Python once on fake tensors) is the escape hatch.

A factory may declare the ``options=`` keys it reads, as a class attribute
``options = {"knob": (int,)}`` (key -> accepted types); ``ember.frontend.compile``
rejects keys that neither the frontend, the capture mode nor the backend's stages read.

To plug in a mode, add one entry — a factory, or a ``"module:attribute"`` string that is
imported on first use (so the registry never imports the mode's package eagerly)::

    CAPTURE_MODES["strict"] = "ember.frontend.bytecode.compiled:StrictFunction"
    # or, at run time:
    register_capture_mode("strict", StrictFunction)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from ember.frontend.stats import CompileStats

__all__ = ["CAPTURE_MODES", "DEFAULT_CAPTURE_MODE", "CompileRequest", "CompiledCallable",
           "register_capture_mode", "resolve_capture_mode"]


@dataclass(frozen=True)
class CompileRequest:
    """What ``ember.frontend.compile`` was asked for. ``fn`` is the user's function (or
    the module itself: call ``fn(*args)`` to run it); ``module`` is the ``nn.Module``
    whose parameters and buffers are graph inputs (``fn`` itself or the owner of a bound
    method), else None. ``options`` are the backend's options (``capture`` removed)."""

    fn: Callable[..., Any]
    module: torch.nn.Module | None
    backend: str
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None
    options: dict[str, Any] = field(default_factory=dict)


class CompiledCallable(Protocol):
    """What a capture mode returns."""

    stats: CompileStats

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def reset(self) -> None: ...


CaptureModeFactory = Callable[[CompileRequest], CompiledCallable]

CAPTURE_MODES: dict[str, CaptureModeFactory | str] = {
    "trace": "ember.frontend.compiled:TracedFunction",
    "strict": "ember.frontend.bytecode.strict:StrictFunction",
}

DEFAULT_CAPTURE_MODE = "strict"


def register_capture_mode(name: str, factory: CaptureModeFactory | str) -> None:
    """Make ``options={"capture": name}`` use ``factory``."""
    CAPTURE_MODES[name] = factory


def resolve_capture_mode(name: str) -> CaptureModeFactory:
    """The factory of capture mode ``name``.

    Raises:
        ValueError: for an unknown mode, listing the known ones.
    """
    if name not in CAPTURE_MODES:
        raise ValueError(f"unknown capture mode {name!r}; known modes: "
                         f"{', '.join(sorted(CAPTURE_MODES))}")
    entry = CAPTURE_MODES[name]
    if isinstance(entry, str):
        module_name, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module_name), attr)
        CAPTURE_MODES[name] = entry
    return entry
