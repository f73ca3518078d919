"""A module's parameters and buffers as graph inputs: where each one lives, how to read
it live at each call, and how to swap in fake tensors while tracing."""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from ember.frontend._torch import dict_version_reader
from ember.frontend.guard_stamp import class_dicts
from ember.runtime.ir import InputKind

__all__ = ["ModuleLayout", "StateSlot", "callable_name", "module_of"]


def module_of(fn: Callable[..., Any]) -> torch.nn.Module | None:
    """The module whose state a compiled ``fn`` reads as inputs: ``fn`` itself, or the
    owner of a bound method; None for other callables."""
    if isinstance(fn, torch.nn.Module):
        return fn
    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, torch.nn.Module) else None


def callable_name(fn: Callable[..., Any]) -> str:
    """How messages name ``fn``: the module's class, else the function's qualified name."""
    if isinstance(fn, torch.nn.Module):
        return type(fn).__name__
    return str(getattr(fn, "__qualname__", None) or fn)


@dataclass(frozen=True)
class StateSlot:
    """One parameter or buffer: ``owner._parameters[attr]`` (or ``_buffers``), known to
    the user as ``qualname``. A tensor reachable under several names (tied weights) is
    one slot; ``aliases`` are its other locations."""

    qualname: str
    kind: InputKind
    owner: torch.nn.Module
    attr: str
    aliases: tuple[tuple[torch.nn.Module, str], ...] = ()

    def read(self) -> torch.Tensor:
        table = self.owner._parameters if self.kind is InputKind.PARAMETER else self.owner._buffers
        value = table[self.attr]
        assert value is not None
        return value


class ModuleLayout:
    """The parameters and buffers of ``module`` (parameters first, each in
    ``named_parameters`` order, deduplicated by identity), and its submodules."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self.structure = _structure(module)
        self._tables: list[dict[Any, Any]] = [
            t for sub in module.modules(remove_duplicate=False)
            for t in (_tables(sub) + _hooks(sub))]
        self._versions = _versions(self._tables)
        modules = list(module.modules())
        classes = list(dict.fromkeys(type(sub) for sub in modules))
        self._method_dicts = [sub.__dict__ for sub in modules] + [
            d for cls in classes for d in class_dicts(cls)]
        self._method_versions = _versions(self._method_dicts)
        self.methods = _methods(modules, classes)
        self.attributes = _attributes(modules)
        self.submodules: list[tuple[str, torch.nn.Module]] = list(module.named_modules())
        self.slots: list[StateSlot] = []
        seen: dict[int, int] = {}  # id(tensor) -> slot index
        aliases: dict[int, list[tuple[torch.nn.Module, str]]] = {}
        for kind, table_name in ((InputKind.PARAMETER, "_parameters"),
                                 (InputKind.BUFFER, "_buffers")):
            for prefix, sub in module.named_modules(remove_duplicate=False):
                for attr, value in getattr(sub, table_name).items():
                    if value is None:
                        continue
                    if id(value) in seen:
                        aliases.setdefault(id(value), []).append((sub, attr))
                        continue
                    qualname = f"{prefix}.{attr}" if prefix else attr
                    seen[id(value)] = len(self.slots)
                    self.slots.append(StateSlot(qualname, kind, sub, attr))
        for i, slot in enumerate(self.slots):
            extra = aliases.get(id(slot.read()))
            if extra:
                self.slots[i] = StateSlot(slot.qualname, slot.kind, slot.owner, slot.attr,
                                          tuple(extra))

    def changed(self) -> bool:
        """Whether the module's tree changed since this layout was made: a submodule
        replaced, added or removed, a parameter or buffer added, removed or set to None
        (the slots would read the old submodules' tensors). A new tensor under the same
        name (``m.weight = nn.Parameter(...)``) is read live and is no change."""
        # NOTE: the tables' version tags first (a write to any of them changes its tag):
        # walking the tree costs ~180 us for a 121-module model, the tags ~10 us
        versions = _versions(self._tables)
        if versions is None or versions != self._versions:
            if _structure(self.module) != self.structure:
                return True
            self._versions = versions  # a write that kept the tree (a buffer assigned anew)
        return self._methods_changed()

    def _methods_changed(self) -> bool:
        """Whether a method of a module of the tree was replaced since: a function or
        bound method set on an instance (``m.forward = f``, ``m.helper =
        MethodType(g, m)``) or removed from it, or a class's function replaced
        (``Cls.helper = g``). The trace ran the old one; its graph would keep running
        it. So does a plain attribute set anew (``m.scale = 4.0``): the trace read it
        as a constant. The instance and class dicts' version tags first (an attribute
        write such as ``eval()``'s ``training`` changes them but neither)."""
        versions = _versions(self._method_dicts)
        if versions is not None and versions == self._method_versions:
            return False
        modules = [sub for _, sub in self.submodules]
        classes = list(dict.fromkeys(type(sub) for sub in modules))
        if _methods(modules, classes) != self.methods or _attributes_changed(
                modules, self.attributes):
            return True
        self._method_versions = versions
        return False

    def settle(self) -> None:
        """Take the tree's plain attributes as they are now: after a trace, whose own
        writes (``self.calls += 1``, warned at capture) are not a change."""
        self.attributes = _attributes([sub for _, sub in self.submodules])
        self._method_versions = _versions(self._method_dicts)

    def read(self) -> list[torch.Tensor]:
        """The live tensors, one per slot."""
        return [slot.read() for slot in self.slots]

    @contextlib.contextmanager
    def swapped(self, values: list[torch.Tensor]) -> Iterator[None]:
        """Make the module hold ``values`` (e.g. fake tensors), one per slot, inside the
        block; the originals are restored after it, also on error."""
        saved: list[tuple[dict[str, Any], str, torch.Tensor | None]] = []
        try:
            for slot, value in zip(self.slots, values):
                for owner, attr in ((slot.owner, slot.attr), *slot.aliases):
                    table: dict[str, Any] = (
                        owner._parameters if slot.kind is InputKind.PARAMETER
                        else owner._buffers
                    )
                    saved.append((table, attr, table[attr]))
                    table[attr] = value  # NOTE: bypasses Module.__setattr__'s type checks
            yield
        finally:
            for table, attr, original in reversed(saved):
                table[attr] = original


def _structure(module: torch.nn.Module) -> tuple[Any, ...]:
    """The module tree by identity, with the names of each module's parameters and
    buffers (and which are None) and the keys of its hook tables (a hook registered on a
    submodule after a trace: the trace did not run it)."""
    return tuple(
        (prefix, id(sub),
         tuple((k, v is None) for k, v in sub._parameters.items()),
         tuple((k, v is None) for k, v in sub._buffers.items()),
         tuple(tuple(table) for table in _hooks(sub)))
        for prefix, sub in module.named_modules(remove_duplicate=False))


def _tables(module: torch.nn.Module) -> tuple[dict[Any, Any], ...]:
    """``module``'s submodule, parameter and buffer tables."""
    return (module._modules, module._parameters, module._buffers)


def _hooks(module: torch.nn.Module) -> tuple[dict[Any, Any], ...]:
    """``module``'s forward, forward-pre, backward and backward-pre hook tables."""
    return (module._forward_pre_hooks, module._forward_hooks, module._backward_hooks,
            module._backward_pre_hooks)


_METHODS = (types.FunctionType, types.MethodType, functools.partial)


def _methods(modules: list[torch.nn.Module], classes: list[type]) -> list[Any]:
    """The callables a call of the tree may run as methods and that can be replaced:
    each module's instance-dict functions and bound methods, each class's functions
    (over their MROs); compared by identity."""
    found: list[Any] = [[(k, v) for k, v in sub.__dict__.items() if isinstance(v, _METHODS)]
                        for sub in modules]
    for cls in classes:
        found.extend([(k, v) for k, v in d.items() if isinstance(v, types.FunctionType)]
                     for d in class_dicts(cls))
    return found


_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def _attributes(modules: list[torch.nn.Module]) -> list[dict[str, str]]:
    """Each module's plain public attributes (numbers, strings, None, tuples of them),
    name -> ``repr``: a trace reads them as constants. ``training`` is guarded by each
    entry instead (a model called in train and in eval mode keeps both)."""
    return [{k: repr(v) for k, v in sub.__dict__.items()
             if k != "training" and not k.startswith("_") and _is_plain(v)}
            for sub in modules]


def _attributes_changed(modules: list[torch.nn.Module], seen: list[dict[str, str]]) -> bool:
    """Whether an attribute of ``seen`` has another value now (or is gone). One added
    since is not a change: the trace did not read it."""
    missing = object()
    for sub, attributes in zip(modules, seen):
        now = sub.__dict__
        for name, text in attributes.items():
            value = now.get(name, missing)
            if value is missing or not _is_plain(value) or repr(value) != text:
                return True
    return False


def _is_plain(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(map(_is_plain, value))
    return isinstance(value, _PLAIN)


def _versions(tables: list[dict[Any, Any]]) -> tuple[int, ...] | None:
    version = dict_version_reader()
    return None if version is None else tuple(map(version, tables))
