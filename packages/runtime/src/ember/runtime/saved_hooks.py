"""The caller's saved-tensor hooks stay out of Ember's recording and compiling.

``torch.autograd.graph.saved_tensors_hooks`` (and ``checkpoint`` without reentrancy,
``save_on_cpu``) apply to every tensor autograd saves on the thread, and an Ember
compile records its graphs on fake tensors with autograd on: the hooks would pack the
recording's tensors (a ``checkpoint`` counted them, and the recomputation, which
compiles nothing, then saved fewer: ``CheckpointError``; a hook that changes its tensor
was baked into the derived backward). :func:`hooks_kept_out` pushes identity hooks over
the caller's while Ember records and compiles; the caller's hooks apply where eager
applies them, to the compiled program's saved values when it runs.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from ember.runtime._torch import saved_tensors_hooks_set


def _keep(t: torch.Tensor) -> torch.Tensor:
    return t


def hooks_kept_out() -> contextlib.AbstractContextManager[Any]:
    """Identity saved-tensor hooks over the caller's, where the caller set any."""
    if not saved_tensors_hooks_set():
        return contextlib.nullcontext()
    return torch.autograd.graph.saved_tensors_hooks(_keep, _keep)
