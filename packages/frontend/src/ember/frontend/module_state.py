"""A module's parameters and buffers as graph inputs: where each one lives, how to read
it live at each call, and how to swap in fake tensors while tracing."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
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
