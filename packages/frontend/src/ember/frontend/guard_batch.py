"""The batched check of a check function's ``tensor`` guards: one C++ call for all of
them while the tensors look as they did on a call where every guard passed.

An optimizer step's check function guards 240 tensors (parameters, gradients, state);
each ``tensor`` guard reads dtype, shape, strides, device, requires_grad and storage
offset in Python (~0.4 us a tensor: most of the lookup's time). With
:data:`MIN_BATCHED` or more of them, :class:`~ember.frontend.guard_writer.MatcherWriter`
fetches each tensor where its guard was, but checks them all at the end::

    if not batch9.holds(v33, v34, ...):     # types, metadata, offsets as last stamped
        if not (<tensor guard of v33>): return None
        ...                                 # every tensor guard, as before
        batch9.learn(v33, v34, ...)         # all passed: stamp these tensors

:meth:`TensorBatch.holds` is torch's C++ tensor check (Python type, dtype, device,
dispatch keys, requires_grad, sizes, strides; ``ember.frontend._torch.
tensor_metadata_checker``) plus the storage offsets: when it holds, every tensor guard
passes (the stamped tensors passed them, and these have the same metadata). When it
does not, the guards decide, as before. A tensor whose value is read through (``p.grad``
of a parameter ``p``) gets its type tested where it is fetched, before the read, so no
attribute of an unexpected object is read before the guards on it have run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from ember.frontend._torch import tensor_metadata_checker

__all__ = ["MIN_BATCHED", "TensorBatch"]

MIN_BATCHED = 8
"""A check function batches its tensor guards from this many (below, the C++ call
costs about what the inline tests do)."""

_STAMPS_WITHOUT_HIT = 3
_offset: Any = torch.Tensor.storage_offset  # NOTE: 2.5x faster than a methodcaller


class TensorBatch:
    """The stamp of one check function's guarded tensors (see the module doc).
    ``hits``: calls it answered; ``stamps``: times it was taken; ``off``: it is no
    longer taken (three stamps with no call answered in between: tensors that change
    every call, or torch's C++ check is missing)."""

    __slots__ = ("hits", "stamps", "off", "_stamp", "_streak")

    def __init__(self) -> None:
        self.hits = 0
        self.stamps = 0
        self.off = False
        # (C++ check, storage offsets), replaced as one (a concurrent learn never pairs
        # one stamp's check with another's offsets)
        self._stamp: tuple[Callable[..., bool], list[int]] | None = None
        self._streak = 0

    def holds(self, *tensors: Any) -> bool:
        """Whether every ``tensor`` guard of the batch passes on ``tensors``; never
        raises (a value that is not a tensor does not hold)."""
        stamp = self._stamp
        if stamp is None:
            return False
        check, offsets = stamp
        try:
            held = bool(check(*tensors)) and list(map(_offset, tensors)) == offsets
        except Exception:  # noqa: BLE001 - the guards decide
            return False
        if held:
            self.hits += 1
            self._streak = 0
        return held

    def learn(self, *tensors: Any) -> None:
        """Stamp ``tensors``, on which every tensor guard of the batch passed."""
        if self.off:
            return
        self._streak += 1
        check = None
        if self._streak <= _STAMPS_WITHOUT_HIT:
            try:
                check = tensor_metadata_checker(list(tensors))
                offsets = list(map(_offset, tensors))
            except Exception:  # noqa: BLE001 - no stamp: the guards keep deciding
                check = None
        if check is None:
            self.off = True
            self._stamp = None
            return
        self._stamp = (check, offsets)
        self.stamps += 1
