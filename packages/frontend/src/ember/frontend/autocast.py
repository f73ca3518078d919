"""Autocast and compiled graphs, at run time (both capture modes).

A capture records ATen ops below autocast's dispatch key, so the casts that autocast
made while the captured code ran (``aten::_to_copy`` to bfloat16, the low-precision
``mm``) are explicit nodes of the graph, and ops run in a region with autocast off have
none. A graph must then run with autocast off, whatever the caller's state: run under
an outer autocast it would be cast again (a matmul of an ``enabled=False`` region,
recorded in float32, would run in bfloat16). :func:`run_graph` and
:func:`compile_without_autocast` do that, at the cost of one C call per graph run when
autocast is off.

The strict capture may leave a ``with torch.autocast(...)`` block open at a graph break
(the break runs eagerly inside the block, with autocast on, as in eager): the segment
then sets, after its graph, the autocast state its code left (:class:`AutocastEnd`), and
the ``__exit__`` on its frame stack is an :class:`AutocastRestore`, which a later
segment (or the concrete interpreter) calls. Both change the global autocast state
exactly as ``torch.autocast.__enter__``/``__exit__`` would, its nesting count (which
clears autocast's cache of cast weights when it returns to 0) included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from ember.frontend._torch import any_autocast_enabled, autocast_disabled

__all__ = ["AutocastEnd", "AutocastRestore", "DeviceAutocast", "compile_without_autocast",
           "leave_nesting", "run_graph", "set_device_state"]

DeviceAutocast = tuple[str, bool, torch.dtype]
"""``(device type, enabled, dtype)``: one device type's autocast state."""


def _without_autocast(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` with autocast off (one C call when it is off already)."""
    if not any_autocast_enabled():
        return fn(*args)
    with autocast_disabled():
        return fn(*args)


def run_graph(runner: Callable[[list[Any]], list[Any]], inputs: list[Any]) -> list[Any]:
    """``runner(inputs)`` with autocast off (see the module docstring)."""
    result: list[Any] = _without_autocast(runner, inputs)
    return result


def compile_without_autocast(compile_fn: Callable[[], Any]) -> Any:
    """``compile_fn()`` with autocast off: the stages that trace the graph again (aot)
    must see its casts as they are, not cast it again."""
    return _without_autocast(compile_fn)


def set_device_state(state: DeviceAutocast) -> None:
    """Set one device type's autocast ``enabled`` and ``dtype``."""
    device, enabled, dtype = state
    torch.set_autocast_enabled(device, enabled)
    torch.set_autocast_dtype(device, dtype)


def leave_nesting(levels: int) -> None:
    """Leave ``levels`` autocast blocks, as their ``__exit__`` does: the cast cache is
    dropped when the nesting count returns to 0."""
    for _ in range(levels):
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()


class AutocastRestore:
    """Stands for ``cm.__exit__`` of a ``torch.autocast`` block on the frame stack:
    calling it restores the state seen at ``__enter__`` (the device type's ``enabled``
    and ``dtype``, the cache flag) and leaves one nesting level. Immutable, so a graph
    break inside the block can rebuild it; a capture calls :meth:`AutocastTracker.exit
    <ember.frontend.bytecode.autocast_blocks.AutocastTracker.exit>` instead."""

    def __init__(self, previous: DeviceAutocast, cache_enabled: bool) -> None:
        self.device, self.enabled, self.dtype = previous
        self.cache_enabled = cache_enabled

    @property
    def previous(self) -> DeviceAutocast:
        return (self.device, self.enabled, self.dtype)

    def __call__(self, *exc: Any) -> bool:
        leave_nesting(1)
        set_device_state(self.previous)
        torch.set_autocast_cache_enabled(self.cache_enabled)
        return False

    def __repr__(self) -> str:
        return (f"AutocastRestore({self.device!r}, enabled={self.enabled}, "
                f"dtype={self.dtype}, cache_enabled={self.cache_enabled})")


@dataclass(frozen=True)
class AutocastEnd:
    """The autocast state a segment's code left, set after its graph: the states of the
    device types it entered or left a block of, the cache flag, and how many blocks it
    left open (positive) or closed that it did not open (negative)."""

    devices: tuple[DeviceAutocast, ...]
    cache_enabled: bool
    nesting: int

    def apply(self) -> None:
        for _ in range(self.nesting):
            torch.autocast_increment_nesting()
        leave_nesting(-self.nesting)
        for state in self.devices:
            set_device_state(state)
        torch.set_autocast_cache_enabled(self.cache_enabled)
