"""Outside objects reached through more than one source, outside objects that may
become one object on a later call, tensor arguments used as keys of the caller's dicts
and sets (found by identity), outside objects handed to library code run for real
(what it reads of them is guarded), and module hook dicts this capture changed.

A capture keeps one view of each outside object (a list/dict's shadow copy, a module,
any other object) and guards the reads made through it on the source it was first
reached through. Two cases would make a variant serve a call it does not fit:

- the same object reached again through another source (``f(a, a)``, a submodule held
  by two attributes): nothing of that source was guarded, so a later call with two
  different objects would read the second through the first. :func:`second_source`
  guards that the new source holds the same object (``same``), as for tensors.
- two different objects of one type, one of them written by the capture
  (``a.append(x); len(b)``): on a call where they are one object, the write shows in
  the other. :func:`guard_written_apart` guards those objects distinct.

Tensor arguments that are different objects over one storage (``f(x, x[:2])``,
``f(x.detach(), x.detach())``) are captured as such (the aot stage reads one as a view of
the other where the graph writes either): :func:`guard_shared_storage` guards that they
share storage as they did, so that a call with unrelated tensors compiles again rather
than meeting the compiled program's aliasing check.
"""

from __future__ import annotations

import collections
import enum
import types
from typing import Any

import torch
from ember.frontend._torch import is_fake
from ember.frontend.guard_model import MODULE_HOOK_TABLES, alias_pattern, storage_key
from ember.frontend.guard_source import Source
from torch import nn

__all__ = ["guard_apart", "guard_contents", "guard_shared_storage", "guard_written_apart",
           "real_key", "real_key_args", "refuse_changed_hooks", "second_source", "written_here"]

_BY_IDENTITY = (type, enum.Enum, types.MethodDescriptorType, types.WrapperDescriptorType,
                types.ModuleType, types.BuiltinFunctionType)
"""Objects every source of which is guarded by identity already."""


def second_source(cap: Any, value: Any, source: Source, first: Source | None) -> bool:
    """When ``value`` was reached before through ``first``, a different source: guard
    that ``source`` holds the same object and return True (the caller reuses its view);
    else False."""
    if first is None or first == source or isinstance(value, _BY_IDENTITY):
        return False
    if callable(value) and not isinstance(value, nn.Module) and (
            type(value).__module__ or "").startswith("torch."):
        return False  # torch's op objects: guarded by identity where read
    cap.guard("same", source, first)
    return True


def _changed(shadow: Any) -> bool:
    copy, initial = shadow.copy, shadow.initial
    if isinstance(copy, list):
        return len(copy) != len(initial) or any(a is not b for a, b in zip(copy, initial))
    items = list(copy.items())
    return len(items) != len(initial) or any(
        a[0] is not b[0] or a[1] is not b[1] for a, b in zip(items, initial))


_KEY_METHODS = frozenset({"get", "pop", "setdefault", "__contains__", "__getitem__",
                          "__setitem__", "__delitem__", "remove", "discard", "add"})
"""Dict and set methods whose first argument is a key."""


def real_key(cap: Any, container: Any, key: Any) -> Any:
    """A graph input used as a key of a dict or set keyed by the caller's tensors
    (``optimizer.state[p]``, ``x in seen``): the real tensor, which is what eager looks
    up (by identity), guarded to be that tensor (not only one of its metadata). Other
    keys unchanged."""
    if not (isinstance(container, (dict, set, frozenset)) and is_fake(key)):
        return key
    first = next(iter(container), None)
    if not (isinstance(container, collections.defaultdict) or (
            isinstance(first, torch.Tensor) and not is_fake(first))):
        return key
    real = cap.real_input(key)
    if real is None:
        return key
    cap.guard("id", cap.is_input_fake(key), real)
    return real


def real_key_args(cap: Any, owner: Any, fn: Any, args: list[Any]) -> list[Any]:
    """``args`` of the dict or set method ``fn`` of ``owner``, the key mapped by
    :func:`real_key`."""
    if args and getattr(fn, "__name__", "") in _KEY_METHODS:
        return [real_key(cap, owner, args[0]), *args[1:]]
    return args


def _plain_object(cap: Any, value: Any) -> bool:
    return (isinstance(getattr(value, "__dict__", None), dict) and not isinstance(
        value, (torch.Tensor, nn.Module, type, enum.Enum, types.FunctionType,
                types.MethodType, *_BY_IDENTITY)) and cap.source_of(value) is not None)


def guard_contents(interp: Any, values: Any, depth: int = 2) -> None:
    """Outside objects handed to standard-library code run for real
    (``dataclasses.asdict(cfg)``, ``copy.copy(obj)``, ``operator.attrgetter``): what
    that code reads of them is a constant of the capture, so each attribute they hold
    is read here through the interpreter (guarded where read), and so into the objects
    those hold, ``depth`` levels deep. (Their attributes read only by that code were
    never guarded: a config changed between calls was not seen.)"""
    for value in values:
        if depth >= 0 and _plain_object(interp.capture, value):
            held = [interp.load_attr(value, name) for name in list(vars(value))
                    if isinstance(name, str)]
            guard_contents(interp, held, depth - 1)


def written_here(cap: Any, real: Any) -> bool:
    """Whether outside list/dict ``real`` was changed by this capture (its shadow copy
    differs: the change is replayed only after the graph)."""
    shadow = cap.shadow_of_real.get(id(real))
    entry = cap.shadows.get(id(shadow)) if shadow is not None else None
    return entry is not None and _changed(entry)


def refuse_changed_hooks(interp: Any, mod: nn.Module) -> None:
    """Break before a call of ``mod`` when this capture changed its hook dicts (a hook
    registered or removed in the compiled code): the call must run the hooks as they
    are then, but the change reaches the module only after the graph."""
    if any(written_here(interp.capture, getattr(mod, table, None))
           for table in (*MODULE_HOOK_TABLES, "_forward_pre_hooks_with_kwargs",
                         "_forward_hooks_with_kwargs")):
        raise interp.fail(f"call to module {type(mod).__name__} whose hooks this code "
                          "changed (the change is made after the graph)",
                          "this break is needed for correctness")


def guard_written_apart(cap: Any) -> None:
    """Guard distinct the outside objects with a source that share a type with one this
    capture wrote (a changed list/dict, an object with an attribute written)."""
    written: set[type] = set()
    seen: dict[int, tuple[Any, Source]] = {}
    for shadow in cap.shadows.values():
        seen[id(shadow.real)] = (shadow.real, shadow.source)
        if _changed(shadow):
            written.add(type(shadow.real))
    for obj in cap.dirty.values():
        if cap.source_of(obj) is not None:
            written.add(type(obj))
    if not written:
        return
    for value, source in cap.sources.values():
        if type(value) in written and id(value) not in seen and not isinstance(
                value, _BY_IDENTITY) and id(value) not in cap.shadows:
            seen[id(value)] = (value, source)
    for cls in written:
        sources = tuple(s for v, s in seen.values() if type(v) is cls)
        if len(sources) > 1:
            cap.guard("distinct", None, sources)


def guard_shared_storage(cap: Any) -> None:
    """One ``aliasing`` guard over the tensor inputs that are different objects sharing a
    storage at capture (module doc); none when no two do."""
    by_storage: dict[int, dict[int, tuple[Source, torch.Tensor]]] = {}
    for source, value in cap.inputs:
        by_storage.setdefault(storage_key(value), {}).setdefault(id(value), (source, value))
    by_storage.pop(0, None)  # empty storages (numel 0, meta tensors): nothing to share
    shared = [member for group in by_storage.values() if len(group) > 1
              for member in group.values()]
    if shared:
        cap.guard("aliasing", None, (tuple(s for s, _ in shared),
                                     alias_pattern([v for _, v in shared])))


def guard_apart(cap: Any) -> None:
    """The guards a finished capture adds on how its outside objects relate:
    :func:`guard_written_apart` and :func:`guard_shared_storage`."""
    guard_written_apart(cap)
    guard_shared_storage(cap)
