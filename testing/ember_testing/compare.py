"""Comparing compiled results with eager's."""

from __future__ import annotations

from collections.abc import Callable

import torch


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when ``a`` and ``b`` are views of one storage."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def prefixed(what: str) -> Callable[[str], str]:
    """A ``msg`` for ``torch.testing.assert_close`` that puts ``what`` before its own
    message (a plain string would replace it)."""
    return lambda message: f"{what}: {message}"
