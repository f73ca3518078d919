"""The outputs a CUDA-graph replay hands out: views of its static results.

A replay writes its results where the recording put them, so the next replay of the same
recording overwrites them. A forward graph's user outputs are handed out as tensors on
a second storage object over that memory (:func:`~ember.runtime._torch.storage_alias`:
no copy), and right before the recording replays again those storages are *revoked*:
reading an output kept from an earlier call raises :data:`STALE_OUTPUT` (``RuntimeError``)
instead of returning the newer call's values. Sizes and strides stay readable. An output
whose values must outlive the next call is ``clone()``-d by the caller, as under
``torch.compile``'s CUDA graphs.

Revoking needs a torch that can make a storage raise (CUDA builds,
:func:`~ember.runtime._torch.can_revoke_storage`); without it, or with
``EMBER_CUDAGRAPH_COPY_OUTPUTS=1``, every output is copied out (one device copy per
output per call: 0.4 ms of HF GPT-2's 5.3 ms on the H200, its logits being 823 MB), so no
output ever changes silently.
Gradients (the backward graph's outputs, which autograd keeps as ``.grad``) are always
copied.
"""

from __future__ import annotations

import torch
from ember.runtime import _torch
from ember.runtime.config import config

#: the error a kept output's read raises once its recording replayed again
STALE_OUTPUT = (
    "Ember: this output of a CUDA-graph replay (mode='reduce-overhead') was overwritten "
    "by a later call of the same compiled model; clone() an output you keep across calls")


def aliasing_supported() -> bool:
    """Whether outputs are handed out as views: this torch can revoke a storage and the
    user did not ask for copies (``EMBER_CUDAGRAPH_COPY_OUTPUTS=1``)."""
    return not config.cudagraph_copy_outputs and _torch.can_revoke_storage()


class HandedOutputs:
    """The storages one recording's latest replay handed out (one per static result
    storage, so that outputs viewing one buffer stay views of one another)."""

    def __init__(self) -> None:
        self._storages: dict[int, torch.UntypedStorage] = {}

    def __len__(self) -> int:
        return len(self._storages)

    def hand_out(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` (a static result) as a tensor on this replay's alias storage."""
        key = value.untyped_storage().data_ptr()
        storage = self._storages.get(key)
        if storage is None:
            storage = self._storages[key] = _torch.storage_alias(value)
        out = torch.empty(0, dtype=value.dtype, device=value.device)
        return out.set_(storage, value.storage_offset(), value.size(), value.stride())

    def revoke(self) -> int:
        """Revoke every storage handed out (before the recording replays again); returns
        how many."""
        count = len(self._storages)
        for storage in self._storages.values():
            _torch.revoke_storage(storage, STALE_OUTPUT)
        self._storages.clear()
        return count


__all__ = ["STALE_OUTPUT", "HandedOutputs", "aliasing_supported"]
