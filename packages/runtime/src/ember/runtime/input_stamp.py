"""InputStamp: one C++ check, per call, that many tensors still look as they did on a
call that passed a slower check, so the slower check can be skipped.

A compiled optimizer step takes hundreds of tensors; checking each one's dtype, device,
sizes and strides in Python costs ~0.3 us a tensor, paid by every call although the
same tensors come back every time. The stamp is learnt from a call whose tensors passed
the slow check (:meth:`InputStamp.learn`) and holds (:meth:`InputStamp.holds`) while
the tensors given have the same Python type, dtype, device, dispatch keys,
requires_grad, sizes and strides (and, with ``pointers``, the same data pointers): then
every metadata test the slow check made passes again. When it does not hold, the slow
check runs, decides, and may stamp the new tensors. Used by

* a compiled wrapper's input checks (ember-inductor writes ``_inputs.holds(...)`` before
  the per-input tests when a graph has many inputs);
* :class:`~ember.runtime.callable.ProgramCallable`'s aliasing check, with pointers:
  tensors at the same addresses with the same sizes and strides address the same bytes,
  so inputs that shared no bytes on the stamped call share none now.

The stamp keeps no reference to the tensors (only their metadata). It turns itself off
after three stamps taken with no call answered in between (tensors that change every
call: a stamp would cost more than it saves), or where torch's C++ check is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["MIN_TENSORS", "InputStamp"]

MIN_TENSORS = 8
"""Below this many tensors the per-tensor tests cost about what the stamp does."""

_STAMPS_WITHOUT_HIT = 3
_data_ptr: Any = torch.Tensor.data_ptr


class InputStamp:
    """The stamp of one list of tensors (see the module doc). ``hits``: calls it
    answered; ``stamps``: times it was learnt; ``off``: it no longer learns."""

    __slots__ = ("pointers", "hits", "stamps", "off", "_stamp", "_streak")

    def __init__(self, pointers: bool = False) -> None:
        self.pointers = pointers
        self.hits = 0
        self.stamps = 0
        self.off = False
        # (C++ check, data pointers or None), replaced as one: a thread that checks
        # while another learns never pairs one stamp's check with another's pointers
        self._stamp: tuple[Callable[..., bool], list[int] | None] | None = None
        self._streak = 0

    @property
    def learnt(self) -> bool:
        """Whether a stamp is held (:meth:`holds` may answer True)."""
        return self._stamp is not None

    def holds(self, *tensors: Any) -> bool:
        """Whether ``tensors`` have the stamped metadata (and pointers); never raises (a
        value that is not a tensor does not hold)."""
        stamp = self._stamp
        if stamp is None:
            return False
        check, ptrs = stamp
        try:
            held = bool(check(*tensors)) and (
                ptrs is None or list(map(_data_ptr, tensors)) == ptrs)
        except Exception:  # noqa: BLE001 - e.g. not a tensor: the slow check decides
            return False
        if held:
            self.hits += 1
            self._streak = 0
        return held

    def learn(self, *tensors: Any) -> None:
        """Stamp ``tensors``, which passed the slow check; never raises."""
        if self.off:
            return
        self._streak += 1
        if self._streak > _STAMPS_WITHOUT_HIT:
            self._turn_off()
            return
        # NOTE: imported here: ember.runtime.compiled imports the callable, which uses this
        from ember.runtime.compiled._torch import metadata_checker

        try:
            check = metadata_checker(tensors)
            ptrs = list(map(_data_ptr, tensors)) if self.pointers else None
        except Exception:  # noqa: BLE001 - not tensors (or no storage): no stamp
            check = None
        if check is None:
            self._turn_off()
            return
        self._stamp = (check, ptrs)
        self.stamps += 1

    def _turn_off(self) -> None:
        self.off = True
        self._stamp = None
