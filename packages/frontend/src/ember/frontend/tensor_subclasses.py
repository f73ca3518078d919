"""Tensor subclasses whose Python a capture would lose.

Both capture modes run the program on fake tensors of the ``torch.Tensor`` type and
record ATen ops: a subclass's own ``__torch_function__`` (a user class that rescales
the result of ``add``, logs calls, ...) or ``__torch_dispatch__`` would never run, so
the compiled result would silently differ from eager's. :func:`overriding_subclass`
names such a tensor's class; the strict capture breaks the graph where it is read (the
code from there runs eagerly, with the overrides), the trace capture refuses it with a
``CaptureError`` naming the argument. ``nn.Parameter`` (and subclasses that do not
override either method) are captured as plain tensors, as before.
"""

from __future__ import annotations

from typing import Any

import torch
from ember.frontend._torch import is_fake

__all__ = ["overriding_subclass"]

_TENSOR_FUNCTION = torch.Tensor.__torch_function__.__func__  # type: ignore[attr-defined]
_PARAMETER_FUNCTION = torch.nn.Parameter.__torch_function__
_TENSOR_DISPATCH = torch.Tensor.__torch_dispatch__


def overriding_subclass(value: torch.Tensor) -> str | None:
    """``"__torch_function__ of <class>"`` (or ``__torch_dispatch__``) when ``value``'s
    type overrides it, else None."""
    cls: Any = type(value)
    if cls is torch.Tensor or cls is torch.nn.Parameter or is_fake(value):
        return None
    function = getattr(cls, "__torch_function__", None)
    if function is not _PARAMETER_FUNCTION and getattr(
            function, "__func__", function) is not _TENSOR_FUNCTION:
        return f"__torch_function__ of {cls.__module__}.{cls.__qualname__}"
    if getattr(cls, "__torch_dispatch__", None) is not _TENSOR_DISPATCH:
        return f"__torch_dispatch__ of {cls.__module__}.{cls.__qualname__}"
    return None
