"""``with torch.autocast(...)`` blocks inside one captured graph.

The block's ``__enter__`` and ``__exit__`` switch the global autocast state for real
while capturing (:class:`AutocastTracker`), so the ops in the block run on fake tensors
under autocast and the recorder, below autocast's dispatch key, records the casts it
makes: ``aten::_to_copy`` to the low-precision dtype, the matmul in that dtype. The graph
then holds them explicitly and runs with autocast off (:mod:`ember.frontend.autocast`),
so ``enabled=False`` regions, nested blocks of other dtypes and the code after the block
keep eager's dtypes whatever the caller's autocast state.

Guards: the graph's casts depend on the autocast state at the capture's start. With
autocast off everywhere (the usual case) one guard says so
(``torch._C._is_any_autocast_enabled() == False``); otherwise every capture guards
``torch.is_autocast_enabled`` of ``cpu`` and ``cuda`` and, where on,
``torch.get_autocast_dtype``. A capture that enters or leaves a block also guards that
device type's dtype and the cache flag at its start (the block's defaults and the state
its end restores are read from them).

At the capture's end the state it started with is set again (the next capture, the
compile and the graph run see the caller's); a segment whose code left a different state
(a break inside the block) carries an :class:`~ember.frontend.autocast.AutocastEnd` that
sets it after its graph. Blocks for other device types (``xpu``, ``mps``), subclasses of
``torch.autocast`` and direct ``cm.__enter__()`` calls stay graph breaks that say why.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from ember.frontend._torch import any_autocast_enabled, autocast_settings
from ember.frontend.autocast import (
    AutocastEnd,
    AutocastRestore,
    DeviceAutocast,
    leave_nesting,
    set_device_state,
)

__all__ = ["AUTOCAST_TYPES", "CAPTURED_DEVICES", "AutocastTracker", "autocast_call_break",
           "is_autocast"]

AUTOCAST_TYPES: tuple[type, ...] = (torch.amp.autocast,
                                    torch.cpu.amp.autocast_mode.autocast,
                                    torch.cuda.amp.autocast_mode.autocast)
"""The context-manager classes captured (``torch.autocast`` is ``torch.amp.autocast``;
the deprecated per-device aliases only fix the device type)."""

CAPTURED_DEVICES = ("cpu", "cuda")
"""Device types whose autocast blocks are captured and whose state is guarded."""

_DIRECT_METHODS = {getattr(cls, name) for cls in AUTOCAST_TYPES
                   for name in ("__enter__", "__exit__")}


def is_autocast(cm: Any) -> bool:
    """Whether ``cm`` is a ``torch.autocast`` object (of any subclass)."""
    return isinstance(cm, torch.amp.autocast)


def autocast_call_break(fn: Any) -> str | None:
    """The break reason for calling an autocast object's ``__enter__``/``__exit__``
    directly (outside a ``with``); None for any other callable."""
    func = fn.__func__ if isinstance(fn, types.MethodType) else fn
    try:
        direct = func in _DIRECT_METHODS
    except TypeError:  # unhashable callable
        return None
    if not direct:
        return None
    return (f"torch.autocast.{getattr(func, '__name__', '?')}() called directly (the "
            "autocast state it sets is only followed through a `with` block)")


def _state(device: str) -> DeviceAutocast:
    return (device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))


def _global(cap: Any, expr: str, value: Any) -> None:
    cap.guard("global", None, (expr, value))


class AutocastTracker:
    """The autocast blocks one capture enters and leaves (see the module docstring).
    Created at the capture's start: it guards the autocast state there."""

    def __init__(self, cap: Any) -> None:
        self.cap = cap
        self.start = {d: _state(d) for d in CAPTURED_DEVICES}
        self.start_cache = torch.is_autocast_cache_enabled()
        self.touched: list[str] = []  # device types whose state the code changed
        self.nesting = 0  # blocks entered minus blocks left
        self._restored = False
        if not any_autocast_enabled():  # the usual case: one guard for every device
            _global(cap, "torch._C._is_any_autocast_enabled()", False)
            return
        for device, enabled, dtype in self.start.values():
            _global(cap, f"torch.is_autocast_enabled({device!r})", enabled)
            if enabled:
                _global(cap, f"torch.get_autocast_dtype({device!r})", dtype)

    def _touch(self, device: str) -> None:
        if device in self.touched:
            return
        self.touched.append(device)
        _global(self.cap, f"torch.get_autocast_dtype({device!r})", self.start[device][2])
        _global(self.cap, "torch.is_autocast_cache_enabled()", self.start_cache)

    def enter(self, interp: Any, cm: Any) -> AutocastRestore:
        """``cm.__enter__()`` of a ``with`` block: switch the state as torch does;
        return what stands for its ``__exit__``.

        Raises:
            GraphBreak: a subclass of ``torch.autocast`` other than torch's own, or a
                device type whose blocks are not captured.
        """
        cls = type(cm)
        if cls not in AUTOCAST_TYPES:
            raise interp.fail(f"context manager {cls.__qualname__} (a subclass of "
                              "torch.autocast: its __enter__/__exit__ may do more)",
                              "the `with` and the block's end run eagerly; use "
                              "torch.autocast itself to capture the block")
        device, dtype, enabled, cache_enabled = autocast_settings(cm)
        if device not in CAPTURED_DEVICES:
            raise interp.fail(f"torch.autocast for device type {device!r}",
                              f"blocks for {' and '.join(CAPTURED_DEVICES)} are captured; "
                              "this one runs eagerly")
        source = self.cap.source_of(cm)
        if source is not None:  # made outside: its settings are fixed by its identity
            self.cap.guard("id", source, cm)
        self._touch(device)
        restore = AutocastRestore(_state(device), torch.is_autocast_cache_enabled())
        set_device_state((device, enabled, dtype))
        torch.autocast_increment_nesting()
        torch.set_autocast_cache_enabled(cache_enabled)
        self.nesting += 1
        return restore

    def exit(self, restore: AutocastRestore) -> bool:
        """The block's ``__exit__``: restore what its ``__enter__`` saw."""
        self._touch(restore.device)
        restore()
        self.nesting -= 1
        return False

    def end(self) -> AutocastEnd | None:
        """The state the code left, when it differs from the start (a block left open
        at a break, or closed after one); None otherwise."""
        if not self.touched:
            return None
        devices = tuple(_state(d) for d in self.touched)
        cache = torch.is_autocast_cache_enabled()
        if (self.nesting == 0 and cache == self.start_cache
                and all(s == self.start[s[0]] for s in devices)):
            return None
        return AutocastEnd(devices, cache, self.nesting)

    def restore_start(self) -> None:
        """Set the state the capture started with again (once; also after a break or
        an error)."""
        if self._restored or not self.touched:
            return
        self._restored = True
        for _ in range(-self.nesting):
            torch.autocast_increment_nesting()
        leave_nesting(self.nesting)  # drops the fake casts cached at nesting 0
        for device in self.touched:
            set_device_state(self.start[device])
        torch.set_autocast_cache_enabled(self.start_cache)
