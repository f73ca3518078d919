"""Iteration over values of known length: the interpreter materialises the items into a
:class:`ListIterator` (an index into a list), which a graph break can rebuild."""

from __future__ import annotations

import enum
import types
from collections.abc import Callable
from typing import Any

import torch
from ember.frontend.bytecode.generators import LazyIterator
from torch import nn


class ListIterator:
    """An iterator over a fixed list of items (what ``GET_ITER`` pushes).

    Its fields have names no mapping protocol probes (``items``/``keys`` would make
    ``OrderedDict.update(iterator)`` take it for a mapping)."""

    def __init__(self, items: list[Any], index: int = 0) -> None:
        self.item_list = items
        self.position = index

    def exhausted(self) -> bool:
        return self.position >= len(self.item_list)

    def next(self) -> Any:
        item = self.item_list[self.position]
        self.position += 1
        return item

    def remaining(self) -> list[Any]:
        rest = self.item_list[self.position:]
        self.position = len(self.item_list)
        return rest

    def __iter__(self) -> ListIterator:
        return self

    def __next__(self) -> Any:
        if self.exhausted():
            raise StopIteration
        return self.next()


class ResumedIterator(ListIterator):
    """A ``ListIterator`` of the frame state at a resume point, seen relative to its
    position: item ``k`` is read through ``IterItemSource(source, k)`` and "is it
    exhausted?" installs a ``remaining`` guard on how many items are left, so a loop
    resumed after a graph break in its body is one cache entry for every iteration
    (and one for the end of the loop), not one per position. The state rebuilt after
    the segment advances the real iterator by :attr:`consumed`.

    NOTE: values that do depend on the position (the index of ``enumerate``) are items,
    guarded by value like any other, unless the item is unpacked straight into locals
    that are never read (``for i, layer in enumerate(self.layers)`` without ``i``):
    ``dead_items``, set by the segment, says which; a plain value there is not guarded.
    """

    def __init__(self, real: ListIterator, source: Any, capture: Any) -> None:
        super().__init__(real.item_list, real.position)
        self.real, self.source, self.capture = real, source, capture
        self.consumed = 0
        self.dead_items: Callable[[], tuple[bool, ...] | None] | None = None

    @property
    def position(self) -> int:
        return self.real.position + self.consumed

    @position.setter
    def position(self, value: int) -> None:  # ListIterator.__init__ sets it
        pass

    def _left(self) -> int:
        return len(self.real.item_list) - self.real.position

    def exhausted(self) -> bool:
        done = self._left() <= self.consumed
        self.capture.guard("remaining", self.source, (self.consumed, done))
        return done

    def next(self) -> Any:
        from ember.frontend.bytecode.sources import IterItemSource

        if self.exhausted():
            raise IndexError("next() on an exhausted resumed iterator")
        item = self.real.item_list[self.real.position + self.consumed]
        source = IterItemSource(self.source, self.consumed)
        dead = self.dead_items() if self.dead_items is not None and type(item) is tuple else None
        if dead is not None and len(dead) == len(item):
            value: Any = self._wrap_unpacked(item, source, dead)
        else:
            value = self.capture.wrap(item, source)
        self.consumed += 1
        return value

    def _wrap_unpacked(self, item: tuple[Any, ...], source: Any,
                       dead: tuple[bool, ...]) -> tuple[Any, ...]:
        from ember.frontend.bytecode.sources import ItemSource

        self.capture.guard("type", source, tuple)
        self.capture.guard("len", source, len(item))
        return tuple(v if unread and type(v) in (int, bool, float, str, type(None))
                     else self.capture.wrap(v, ItemSource(source, i))
                     for i, (v, unread) in enumerate(zip(item, dead)))

    def remaining(self) -> list[Any]:
        rest = []
        while not self.exhausted():
            rest.append(self.next())
        return rest


_SEQUENCE_MODULES = (nn.ModuleList, nn.Sequential, nn.ParameterList)
_MAPPING_MODULES = (nn.ModuleDict, nn.ParameterDict)


def make_iterator(value: Any, interp: Any) -> Any:
    """A ListIterator over ``value``.

    Raises:
        GraphBreak: (symbolic mode) for an iterable whose length is not known.
    """
    if isinstance(value, (ListIterator, LazyIterator)):
        return value
    if isinstance(value, (list, tuple, str, range, bytes, set, frozenset)):
        return ListIterator(list(value))
    if isinstance(value, dict):
        return ListIterator(list(value.keys()))
    if isinstance(value, enum.EnumMeta):  # an Enum class: its members, fixed at definition
        return ListIterator(list(value))
    if isinstance(value, (type({}.keys()), type({}.values()), type({}.items()))):
        return ListIterator(list(value))
    if isinstance(value, _SEQUENCE_MODULES + _MAPPING_MODULES):
        _guard_module_container(value, interp)
    if isinstance(value, _SEQUENCE_MODULES):
        return ListIterator([interp.subscr(value, i) for i in range(len(value))])
    if isinstance(value, _MAPPING_MODULES):
        return ListIterator(list(value.keys()))
    if isinstance(value, torch.Tensor):
        if value.dim() == 0:
            raise TypeError("iteration over a 0-d tensor")
        return ListIterator(list(value.unbind(0)))
    iter_fn = getattr(type(value), "__iter__", None)
    if interp.symbolic and isinstance(iter_fn, types.FunctionType) and iter_fn.__code__.co_filename.startswith("<frozen "):
        # NOTE: a collections.abc mixin __iter__ (Sequence, Mapping): run it for real.
        return ListIterator(list(value))
    if interp.symbolic and isinstance(iter_fn, types.FunctionType):
        frame = interp.current_frame
        result = interp.calls.call_symbolic(interp, frame, iter_fn, [value], {})
        if isinstance(result, (ListIterator, LazyIterator)):
            return result
    if interp.symbolic:
        raise interp.fail(f"iteration over a {type(value).__name__} (length unknown to "
                          "Ember)", "iterate over a list, tuple, range, dict or module "
                          "container")
    return iter(value)


def _guard_module_container(value: Any, interp: Any) -> None:
    """Iterating a module container reads how many (and, for a dict, which) members it
    has: guarded, since containers are guarded by type, not identity."""
    cap: Any = getattr(interp, "capture", None)
    source = cap.source_of(value) if cap is not None else None
    if source is None:
        return
    if isinstance(value, _SEQUENCE_MODULES):
        cap.guard("len", source, len(value))
    else:
        cap.guard("keys", source, tuple(value.keys()))
