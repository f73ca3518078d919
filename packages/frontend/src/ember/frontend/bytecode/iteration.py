"""Iteration over values of known length: the interpreter materialises the items into a
:class:`ListIterator` (an index into a list), which a graph break can rebuild."""

from __future__ import annotations

import collections
import enum
import gc
import itertools
import types
from collections.abc import Callable
from typing import Any

import torch
from ember.frontend.bytecode.generators import LazyIterator
from ember.frontend.bytecode.list_iterator import ListIterator
from ember.frontend.bytecode.subclass_items import item_view, outside_subclass
from ember.frontend.containers import reads_items_as
from torch import nn


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


class EnumeratedList(ListIterator):
    """``enumerate(xs)`` of a list, read live as CPython's iterator does: items appended
    (or removed) by the loop body are seen. ``item_list`` is a snapshot of what is left
    to give, as the frame state at a break rebuilds it."""

    def __init__(self, items: list[Any], start: int) -> None:
        self.live, self.start, self.position = items, start, 0

    @property
    def item_list(self) -> list[Any]:
        return [(self.start + i, v) for i, v in enumerate(self.live)]

    @item_list.setter
    def item_list(self, value: list[Any]) -> None:
        raise TypeError("the items of an enumerated list are its list's")

    def exhausted(self) -> bool:
        return self.position >= len(self.live)

    def next(self) -> Any:
        item = (self.start + self.position, self.live[self.position])
        self.position += 1
        return item


class SizedIterator(ListIterator):
    """Iteration over a dict, a dict view or a set: the keys (or items) it had when the
    iteration began, values read when given (as CPython's dict iterators read them), and
    CPython's ``RuntimeError`` once the container changed size."""

    def __init__(self, owner: Any, kind: str,
                 read: Callable[[Any], Any] | None = None) -> None:
        self.owner, self.kind, self.size = owner, kind, len(owner)
        # a value of the dict at key k (guarded where the dict has a source: _read_item)
        self.read: Callable[[Any], Any] = read if read is not None else (
            owner.__getitem__ if kind in ("values", "items") else _no_values)
        self.keys = list(owner) if kind in ("set", "keys", "deque") else list(owner.keys())
        items = self.keys if kind in ("set", "keys", "deque") else (
            [self.read(k) for k in self.keys] if kind == "values"
            else [(k, self.read(k)) for k in self.keys])
        super().__init__(items)

    def _check(self) -> None:
        if len(self.owner) != self.size:
            if self.kind == "deque":
                raise RuntimeError("deque mutated during iteration")
            what = "Set" if self.kind == "set" else "dictionary"
            raise RuntimeError(f"{what} changed size during iteration")

    def exhausted(self) -> bool:
        self._check()
        return super().exhausted()

    def next(self) -> Any:
        self._check()
        if self.kind in ("values", "items") and self.position < len(self.keys):
            key = self.keys[self.position]
            value = self.read(key)
            self.item_list[self.position] = value if self.kind == "values" else (key, value)
        return super().next()


def _no_values(key: Any) -> Any:
    raise TypeError("a set, a deque or a dict's keys are iterated without values")


def _dict_iterator(value: Any, interp: Any) -> ListIterator:
    """A :class:`SizedIterator` over a dict or one of its views."""
    if isinstance(value, dict):
        return SizedIterator(value, "keys")
    kind = ("keys" if isinstance(value, type({}.keys())) else
            "values" if isinstance(value, type({}.values())) else "items")
    return SizedIterator(value.mapping, kind, _read_item(_viewed_dict(value), interp))


def _viewed_dict(view: Any) -> Any:
    """The dict a dict view shows (its ``.mapping`` is a read-only proxy of it)."""
    return next((r for r in gc.get_referents(view.mapping) if isinstance(r, dict)),
                view.mapping)


def _read_item(owner: dict[Any, Any], interp: Any) -> Callable[[Any], Any] | None:
    """How the values of ``owner.values()`` / ``.items()`` are read in a capture: through
    ``owner``'s source, as ``owner[k]`` is (an int or str key), so that what the loop
    reads on them is guarded (``for p in module.parameters(): if p.grad is not None``
    read each parameter's ``.grad`` unguarded: a train step's ``zero_grad()`` was
    captured as a no-op, and later calls kept the gradients); None: read as they are."""
    cap = interp.capture
    if cap is None or interp.calls_run_for_real:
        return None  # inside a call run for real on fake tensors (clip_grad_norm_): its own
    source = cap.source_of(owner)
    if source is None:
        source = _module_table_source(cap, owner)
    if source is None:
        return None
    from ember.frontend.bytecode.sources import ItemSource

    def read(key: Any) -> Any:
        value = owner[key]
        if type(key) not in (int, str):
            return value
        if isinstance(value, torch.Tensor):
            # NOTE: a parameter stays the real tensor (code run for real, such as
            # clip_grad_norm_, reads its .grad; an op on it lifts it to an input), with a
            # source, so that what the loop reads of it (.grad) is guarded
            cap.sources.setdefault(id(value), (value, ItemSource(source, key)))
            return value
        return cap.wrap(value, ItemSource(source, key))

    return read


_MODULE_TABLES = ("_parameters", "_buffers", "_modules")


def _module_table_source(cap: Any, owner: Any) -> Any:
    """The source of ``owner`` when it is a table (``_parameters``, ``_buffers``,
    ``_modules``) of a module the capture has a source for, reached without one: torch's
    ``named_parameters`` reads ``module._parameters.items()`` in a lambda of torch's own,
    which runs for real. None when it is no such table."""
    if type(owner) is not dict:
        return None
    from ember.frontend.bytecode.sources import AttrSource

    # the tables of the sourced modules by id, extended by the sources added since the
    # last call (a model's parameters() reaches this once per module)
    scanned, tables = cap.module_tables
    for value, source in itertools.islice(list(cap.sources.values()), scanned, None):
        if isinstance(value, nn.Module):
            for table in _MODULE_TABLES:
                members = value.__dict__.get(table)
                if type(members) is dict:
                    tables.setdefault(id(members), (members, AttrSource(source, table)))
    cap.module_tables = (len(cap.sources), tables)
    found = tables.get(id(owner))
    return found[1] if found is not None and found[0] is owner else None


_SEQUENCE_MODULES = (nn.ModuleList, nn.Sequential, nn.ParameterList)
_MAPPING_MODULES = (nn.ModuleDict, nn.ParameterDict)


def make_iterator(value: Any, interp: Any) -> Any:
    """A ListIterator over ``value``.

    Raises:
        GraphBreak: (symbolic mode) for an iterable whose length is not known.
    """
    if isinstance(value, (ListIterator, LazyIterator)):
        return value
    if outside_subclass(interp.capture, value):
        value = item_view(interp.capture, value)  # a list subclass, a ModelOutput's keys
    if type(value) is list:  # read live: items the loop appends are seen, as in CPython
        return ListIterator(value)
    if type(value) is set:
        return SizedIterator(value, "set")
    if isinstance(value, (list, tuple, str, range, bytes, set, frozenset)):
        return ListIterator(list(value))
    if type(value) is collections.deque and interp.symbolic and interp.capture.constructed.get(
            id(value), (None,))[0] is value:  # a deque this capture made
        return SizedIterator(value, "deque")
    if type(value) in (dict, collections.OrderedDict, collections.defaultdict):
        return _dict_iterator(value, interp)
    if isinstance(value, dict):
        return ListIterator(list(value.keys()))
    if isinstance(value, enum.EnumMeta):  # an Enum class: its members, fixed at definition
        return ListIterator(list(value))
    if isinstance(value, (type({}.keys()), type({}.values()), type({}.items()))):
        return _dict_iterator(value, interp)
    if isinstance(value, types.MappingProxyType):
        return ListIterator(list(value))
    # NOTE: a container subclass with its own __iter__/__getitem__/__len__ is iterated
    # through them (below), as CPython does
    container = reads_items_as(value, _SEQUENCE_MODULES + _MAPPING_MODULES)
    if container is not None:
        _guard_module_container(value, interp)
    if container in _SEQUENCE_MODULES:
        return ListIterator([interp.subscr(value, i) for i in range(len(value))])
    if container in _MAPPING_MODULES:
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
