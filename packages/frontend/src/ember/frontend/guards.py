"""Guards: the conditions under which a captured graph may be reused.

A capture records what it depended on — the pytree structure of the arguments, each
tensor's dtype/shape/strides/storage offset/device/requires_grad, which tensor arguments
share objects or storage, each non-tensor argument's value (modules and other objects:
identity), ``torch.is_grad_enabled()``, autocast and the default dtype, and every
submodule's ``training`` flag. :class:`GuardSet` compiles them into ONE Python function (one boolean expression),
so a cache lookup costs one call; only when it fails are the guards evaluated one by
one, to name the first that failed.

NOTE: guard expressions are text this module writes: names (``L``, ``C3``), Python
syntax and booleans. Every captured value (shapes, argument values, the pytree spec with
its dict keys) is a constant ``C<i>`` of the check function's namespace, never pasted into
the source, so no ``repr()`` of a user object is ever run.

The check function's arguments, used in guard expressions:

``L``     the flat leaves of ``(args, kwargs)``
``S``     the module's live parameters and buffers (:class:`ModuleLayout` order)
``spec``  the arguments' pytree spec
``grad``  ``torch.is_grad_enabled()``
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from ember.runtime.ir import SourceLocation

__all__ = ["Guard", "GuardFailure", "GuardSet"]

CheckFn = Callable[[list[Any], list[torch.Tensor], Any, bool], bool]

_SIMPLE_VALUE_TYPES = (bool, int, float, str, bytes, complex, type(None), torch.dtype,
                       torch.device, torch.layout, torch.memory_format, torch.Size)


# What evaluating one guard on unexpected arguments can raise (e.g. L[3] after the
# argument structure changed).
_EVAL_ERRORS = (IndexError, KeyError, AttributeError, TypeError, ValueError, RuntimeError)


@dataclass(frozen=True)
class Guard:
    """One condition: ``expr`` is a Python expression over ``L``, ``S``, ``spec``,
    ``grad`` and the constants ``C<i>`` of its GuardSet; ``text`` is how messages show it
    (``x.shape == (4, 8)``)."""

    expr: str
    text: str


def alias_pattern(tensors: Any) -> tuple[tuple[int, int], ...]:
    """For each tensor: (position of the first tensor that is the same object, position
    of the first tensor with the same storage)."""
    same_object: dict[int, int] = {}
    same_storage: dict[int, int] = {}
    return tuple(
        (same_object.setdefault(id(t), i), same_storage.setdefault(_storage_key(t), i))
        for i, t in enumerate(tensors)
    )


def _object_text(value: Any) -> str:
    return f"a {type(value).__name__} at {id(value):#x}"


def _storage_key(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # no storage (sparse, nested): itself
        return id(t)


@dataclass(frozen=True)
class GuardFailure:
    """The first guard that failed, the value it saw, and where the guarded values
    entered the user's code (``origin``: the traced function's ``def`` line, since
    tracing guards the arguments and module state it was called with)."""

    guard: Guard
    actual: str
    origin: SourceLocation | None = None

    def __str__(self) -> str:
        return f"{self.guard.text} (got {self.actual})"

    def located(self) -> str:
        """``str(self)`` and, when known, ``; guard from file:line in fn: text``."""
        if self.origin is None:
            return str(self)
        where = f"{self.origin.file}:{self.origin.line} in {self.origin.function}"
        if self.origin.text:
            where += f": {self.origin.text}"
        return f"{self}; guard from {where}"


@dataclass
class GuardSet:
    """Guards of one cache entry, built with the ``add_*`` methods, then
    :meth:`compile`d into one check function."""

    guards: list[Guard] = field(default_factory=list)
    constants: list[Any] = field(default_factory=list)
    # the user source line the guarded values come from, shown with a failure
    origin: SourceLocation | None = None
    _check: CheckFn | None = None
    _actuals: list[str] = field(default_factory=list)  # expression giving the seen value

    def constant(self, value: Any) -> str:
        """The name under which ``value`` is available to guard expressions."""
        self.constants.append(value)
        return f"C{len(self.constants) - 1}"

    def add(self, expr: str, text: str, actual: str) -> None:
        """Add a guard; ``actual`` is an expression for the value shown on failure."""
        self.guards.append(Guard(expr, text))
        self._actuals.append(actual)
        self._check = None

    # ---- guard builders ---------------------------------------------------------------

    def add_spec(self, spec: Any) -> None:
        c = self.constant(spec)
        self.add(f"spec == {c}", "the arguments' structure is unchanged", "spec")

    def add_grad_mode(self, enabled: bool) -> None:
        self.add(f"grad is {bool(enabled)}", f"torch.is_grad_enabled() is {enabled}", "grad")

    def add_global_state(self) -> None:
        """Guards on the torch state that changes which ops run: the default dtype and
        autocast (CPU and CUDA; its dtype when on)."""
        default = torch.get_default_dtype()
        c = self.constant(default)
        self.add(f"torch.get_default_dtype() is {c}", f"torch.get_default_dtype() == {default}",
                 "torch.get_default_dtype()")
        for device in ("cpu", "cuda"):
            on = torch.is_autocast_enabled(device)
            self.add(f"torch.is_autocast_enabled({device!r}) is {bool(on)}",
                     f"torch.is_autocast_enabled({device!r}) is {on}",
                     f"torch.is_autocast_enabled({device!r})")
            if on:
                dtype = torch.get_autocast_dtype(device)
                c = self.constant(dtype)
                self.add(f"torch.get_autocast_dtype({device!r}) is {c}",
                         f"torch.get_autocast_dtype({device!r}) == {dtype}",
                         f"torch.get_autocast_dtype({device!r})")

    def add_tensor(self, ref: str, name: str, t: torch.Tensor) -> None:
        """Guards on the metadata of tensor ``ref`` (``L[0]``), shown as ``name``."""
        self.add(f"isinstance({ref}, torch.Tensor)", f"{name} is a tensor",
                 f"type({ref}).__name__")
        dtype = self.constant(t.dtype)
        self.add(f"{ref}.dtype is {dtype}", f"{name}.dtype == {t.dtype}", f"{ref}.dtype")
        shape = tuple(t.shape)
        self.add(f"{ref}.shape == {self.constant(shape)}", f"{name}.shape == {shape}",
                 f"tuple({ref}.shape)")
        stride = tuple(t.stride())
        self.add(f"{ref}.stride() == {self.constant(stride)}", f"{name}.stride() == {stride}",
                 f"{ref}.stride()")
        offset = t.storage_offset()
        self.add(f"{ref}.storage_offset() == {self.constant(offset)}",
                 f"{name}.storage_offset() == {offset}", f"{ref}.storage_offset()")
        device = self.constant(t.device)
        self.add(f"{ref}.device == {device}", f"{name}.device == {t.device}",
                 f"{ref}.device")
        rg = bool(t.requires_grad)
        self.add(f"{ref}.requires_grad is {rg}", f"{name}.requires_grad == {rg}",
                 f"{ref}.requires_grad")

    def add_value(self, ref: str, name: str, value: Any) -> None:
        """Guards on a non-tensor argument: equal by type and value for simple values,
        else by identity (modules, functions, other objects)."""
        if isinstance(value, float) and math.isnan(value):
            self.add(f"type({ref}) is float and {ref} != {ref}", f"{name} is nan", f"{ref}")
        elif isinstance(value, _SIMPLE_VALUE_TYPES):
            c = self.constant(value)
            self.add(f"type({ref}) is type({c}) and {ref} == {c}", f"{name} == {value!r}",
                     f"{ref}")
        else:
            c = self.constant(value)
            self.add(f"{ref} is {c}", f"{name} is the same object as at capture",
                     f"_object_text({ref})")
            if isinstance(value, torch.nn.Module):
                self.add_training(name, value)

    def add_aliasing(self, refs: list[str], names: list[str], values: list[Any]) -> None:
        """One guard that the tensors ``refs`` share objects and storages, pairwise, as
        ``values`` did at capture: ``f(x, x)``, ``f(x, x[1:])`` and ``f(x, y)`` are
        different graphs (a mutation through one is seen through the other)."""
        pattern = alias_pattern(values)
        shared = [n for n, p, i in zip(names, pattern, range(len(pattern))) if p != (i, i)]
        text = ("no two tensor arguments share memory" if not shared else
                f"the same tensors/storages are shared as at capture ({', '.join(shared)})")
        c = self.constant(pattern)
        items = ", ".join(refs) + ("," if len(refs) == 1 else "")
        self.add(f"alias_pattern(({items})) == {c}", text, f"alias_pattern(({items}))")

    def add_training(self, name: str, module: torch.nn.Module) -> None:
        """Guards on the ``training`` flag of ``module`` and of every submodule."""
        for sub_name, sub in module.named_modules():
            c = self.constant(sub)
            label = f"{name}.{sub_name}" if sub_name else name
            self.add(f"{c}.training is {bool(sub.training)}",
                     f"{label}.training == {sub.training}", f"{c}.training")

    # ---- checking ---------------------------------------------------------------------

    def source(self) -> str:
        """The check function's Python source."""
        body = "\n        and ".join(f"({g.expr})" for g in self.guards) or "True"
        return f"def check(L, S, spec, grad):\n    return (\n        {body}\n    )\n"

    def compile(self) -> CheckFn:
        """The one check function (cached)."""
        if self._check is None:
            namespace = self._namespace()
            exec(compile(self.source(), "<ember guards>", "exec"), namespace)  # noqa: S102
            self._check = namespace["check"]
        return self._check

    def __call__(self, L: list[Any], S: list[torch.Tensor], spec: Any, grad: bool) -> bool:
        return self.compile()(L, S, spec, grad)

    def first_failure(
        self, L: list[Any], S: list[torch.Tensor], spec: Any, grad: bool
    ) -> GuardFailure | None:
        """The first guard that fails on these arguments (slow: one eval per guard)."""
        scope = dict(self._namespace(), L=L, S=S, spec=spec, grad=grad)
        for guard, actual in zip(self.guards, self._actuals):
            try:
                ok = eval(guard.expr, scope)
            except _EVAL_ERRORS:  # an assumption of a later guard broke (index, attribute)
                ok = False
            if not ok:
                try:
                    seen = repr(eval(actual, scope))
                except _EVAL_ERRORS:
                    seen = "a value that cannot be read"
                return GuardFailure(guard, seen, self.origin)
        return None

    def describe(self) -> str:
        """One guard per line, for the ``guards`` log."""
        return "\n".join(f"  {g.text}" for g in self.guards)

    def _namespace(self) -> dict[str, Any]:
        ns: dict[str, Any] = {"torch": torch, "alias_pattern": alias_pattern,
                              "_object_text": _object_text}
        ns.update({f"C{i}": c for i, c in enumerate(self.constants)})
        return ns
