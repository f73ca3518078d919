"""Module containers and their subclasses: a subclass reads its items as its base does
unless it overrides how (torchvision's ``Conv2dNormActivation`` is a ``Sequential``
with its own ``__init__`` only; a subclass with its own ``__getitem__`` or ``__iter__``
reads anything it likes)."""

from __future__ import annotations

from typing import Any

__all__ = ["ITEM_METHODS", "reads_items_as"]

ITEM_METHODS = ("__getitem__", "__iter__", "__len__")
"""The methods through which a container's items and length are read."""


def _resolved(cls: type, name: str) -> Any:
    for k in cls.__mro__:
        if name in k.__dict__:
            return k.__dict__[name]
    return None


def reads_items_as(value: Any, bases: tuple[type, ...]) -> type | None:
    """The one of ``bases`` whose item reads ``value`` keeps (its type is that base, or
    a subclass that resolves every :data:`ITEM_METHODS` to the base's own), or None."""
    cls = type(value)
    if cls in bases:
        return cls
    for base in bases:
        if issubclass(cls, base):
            same = all(_resolved(cls, name) is _resolved(base, name) for name in ITEM_METHODS)
            return base if same else None
    return None
