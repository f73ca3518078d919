"""The tracing capture's guards: the one guard model (:mod:`ember.frontend.guard_model`)
over the values of one call.

A capture depends on the pytree structure of the arguments (``structure``), each
tensor's metadata (``tensor``: dtype, shape, strides, storage offset, device,
requires_grad), which tensor arguments share objects or storage (``aliasing``), each
non-tensor argument's value (``equals``; modules and other objects: ``id``), grad mode,
autocast and the default dtype (``grad_mode``, ``global``), and every submodule's
``training`` flag (``equals`` on a :class:`TrainingFlagSource`). They are checked over
a :class:`TraceCall`; the guarded values enter the user's code at the traced
function's ``def`` line, the origin of every guard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from ember.frontend.guard_model import (
    CodeWriter,
    Guard,
    Source,
    alias_pattern,
    index_code,
    tensor_guard,
)
from ember.frontend.guards import GuardSet

__all__ = ["ArgumentSource", "ModuleSlotSource", "ObjectSource", "SpecSource", "StateSource",
           "TraceCall", "TrainingFlagSource", "add_aliasing", "add_call_guards", "add_tensor",
           "add_training", "add_value"]

_SIMPLE_VALUE_TYPES = (bool, int, float, str, bytes, complex, type(None), torch.dtype,
                       torch.device, torch.layout, torch.memory_format, torch.Size)


class TraceCall(NamedTuple):
    """What the tracing capture's guards read at a call (``S`` of its matcher): the flat
    leaves of ``(args, kwargs)``, the module's live parameters and buffers
    (:class:`~ember.frontend.module_state.ModuleLayout` order), the arguments' spec."""

    leaves: list[Any]
    state: list[torch.Tensor]
    spec: Any


@dataclass(frozen=True)
class ArgumentSource(Source):
    """Leaf ``index`` of the call's ``(args, kwargs)``, shown as ``name``."""

    index: int
    name: str

    def expr(self) -> str:
        return self.name

    def fetch(self, state: Any, ctx: Any) -> Any:
        return state.leaves[self.index]

    def fetch_code(self, w: CodeWriter) -> str:
        return f"S.leaves[{index_code(self.index)}]"


@dataclass(frozen=True)
class StateSource(Source):
    """Parameter or buffer ``index`` of the compiled module, shown as its ``name``."""

    index: int
    name: str

    def expr(self) -> str:
        return self.name

    def fetch(self, state: Any, ctx: Any) -> Any:
        return state.state[self.index]

    def fetch_code(self, w: CodeWriter) -> str:
        return f"S.state[{index_code(self.index)}]"


@dataclass(frozen=True)
class SpecSource(Source):
    """The pytree spec of the call's ``(args, kwargs)``."""

    def expr(self) -> str:
        return "the arguments' structure"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return state.spec

    def fetch_code(self, w: CodeWriter) -> str:
        return "S.spec"


@dataclass(frozen=True, eq=False)
class ObjectSource(Source):
    """An object held since capture (a closure tensor lifted to an input), shown as
    ``name``. Two are equal when they hold the same object (never ``==`` on it)."""

    obj: Any
    name: str

    def expr(self) -> str:
        return self.name

    def fetch(self, state: Any, ctx: Any) -> Any:
        return self.obj

    def fetch_code(self, w: CodeWriter) -> str:
        return w.const("obj", self.obj)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ObjectSource) and other.obj is self.obj
                and other.name == self.name)

    def __hash__(self) -> int:
        return hash((id(self.obj), self.name))


@dataclass(frozen=True, eq=False)
class ModuleSlotSource(Source):
    """Parameter or buffer ``index`` of a module argument, read live through its
    ``layout``, shown as ``name``."""

    layout: Any
    index: int
    name: str

    def expr(self) -> str:
        return self.name

    def fetch(self, state: Any, ctx: Any) -> Any:
        return self.layout.slots[self.index].read()

    def fetch_code(self, w: CodeWriter) -> str:
        return f"{w.const('layout', self.layout)}.slots[{index_code(self.index)}].read()"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ModuleSlotSource) and other.layout is self.layout
                and other.index == self.index)

    def __hash__(self) -> int:
        return hash((id(self.layout), self.index))


@dataclass(frozen=True, eq=False)
class TrainingFlagSource(Source):
    """The ``training`` flag of ``module`` (held since capture), shown as
    ``name.training``."""

    module: torch.nn.Module
    name: str

    def expr(self) -> str:
        return f"{self.name}.training"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return self.module.training

    def fetch_code(self, w: CodeWriter) -> str:
        return f"{w.const('module', self.module)}.training"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TrainingFlagSource) and other.module is self.module

    def __hash__(self) -> int:
        return hash(id(self.module))


def add_call_guards(guards: GuardSet, spec: Any) -> None:
    """Guards on the arguments' structure and on the torch state that changes which ops
    run: grad mode, inference mode, the default dtype, autocast (CPU and CUDA; its dtype
    when on)."""
    guards.add(Guard("structure", SpecSource(), spec))
    guards.add(Guard("grad_mode", None, torch.is_grad_enabled()))
    guards.add(Guard("global", None, ("torch.is_inference_mode_enabled()",
                                      torch.is_inference_mode_enabled())))
    guards.add(Guard("global", None, ("torch.get_default_dtype()", torch.get_default_dtype())))
    for device in ("cpu", "cuda"):
        on = torch.is_autocast_enabled(device)
        guards.add(Guard("global", None, (f"torch.is_autocast_enabled({device!r})", on)))
        if on:
            guards.add(Guard("global", None, (f"torch.get_autocast_dtype({device!r})",
                                              torch.get_autocast_dtype(device))))


def add_tensor(guards: GuardSet, source: Source, t: torch.Tensor) -> None:
    """The ``tensor`` guard on the metadata of ``t`` at ``source``."""
    guards.add(tensor_guard(source, t))


def add_value(guards: GuardSet, source: Source, value: Any) -> None:
    """Guards on a non-tensor argument: equal by type and value for simple values (NaN
    equals NaN), else by identity (modules, functions, other objects); a module's
    ``training`` flags too."""
    if isinstance(value, _SIMPLE_VALUE_TYPES):
        guards.add(Guard("equals", source, value))
        return
    guards.add(Guard("id", source, value))
    if isinstance(value, torch.nn.Module):
        add_training(guards, source.expr(), value)


def add_aliasing(guards: GuardSet, sources: list[Source], values: list[Any]) -> None:
    """One guard that the tensors at ``sources`` share objects and storages, pairwise, as
    ``values`` did at capture: ``f(x, x)``, ``f(x, x[1:])`` and ``f(x, y)`` are
    different graphs (a mutation through one is seen through the other)."""
    guards.add(Guard("aliasing", None, (tuple(sources), alias_pattern(values))))


def add_training(guards: GuardSet, name: str, module: torch.nn.Module) -> None:
    """Guards on the ``training`` flag of ``module`` and of every submodule."""
    for sub_name, sub in module.named_modules():
        label = f"{name}.{sub_name}" if sub_name else name
        guards.add(Guard("equals", TrainingFlagSource(sub, label), bool(sub.training)))
