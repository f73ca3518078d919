"""Guards: the facts a captured segment depends on, compiled into one check function.

Each :class:`Guard` tests one value fetched through a :class:`~.sources.Source`. A
:class:`GuardSet` deduplicates them, renders them readably (``EMBER_LOGS=guards``) and
compiles them into a single generated Python function ``check(S, C) -> bool`` — one
expression chain, no per-guard call overhead. On a miss :meth:`GuardSet.first_failure`
re-checks the guards one by one to name the one that failed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from ember.frontend.bytecode.sources import Source, python_expr


@dataclass(frozen=True)
class Guard:
    """One check. ``kind`` is one of ``tensor``, ``equals``, ``id``, ``type``, ``len``,
    ``keys``, ``grad_mode``, ``distinct`` (tensor inputs are different objects),
    ``same`` (two sources are one object), ``global`` (an expression over torch's global
    state, e.g. the default dtype); ``expected`` the captured fact."""

    kind: str
    source: Source | None
    expected: Any

    def describe(self) -> str:
        where = self.source.expr() if self.source is not None else ""
        if self.kind == "tensor":
            dtype, sizes, strides, device, rg, offset = self.expected
            return (f"{where}.dtype == {dtype} and {where}.shape == {sizes} and "
                    f"{where}.stride() == {strides} and {where}.device == {device} and "
                    f"{where}.requires_grad == {rg} and "
                    f"{where}.storage_offset() == {offset}")
        if self.kind == "equals":
            return f"{where} == {self.expected!r} ({type(self.expected).__name__})"
        if self.kind == "id":
            return f"{where} is <{_short(self.expected)}>"
        if self.kind == "type":
            return f"type({where}) is {self.expected.__qualname__}"
        if self.kind == "len":
            return f"len({where}) == {self.expected}"
        if self.kind == "keys":
            return f"list({where}.keys()) == {list(self.expected)!r}"
        if self.kind == "distinct":
            return f"{', '.join(x.expr() for x in self.expected)} are distinct tensors"
        if self.kind == "same":
            return f"{where} is {self.expected.expr()}"
        if self.kind == "global":
            return f"{self.expected[0]} == {self.expected[1]!r}"
        if self.kind == "grad_mode":
            return f"torch.is_grad_enabled() == {self.expected}"
        return f"{self.kind}({where}, {self.expected!r})"


def _short(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{name} at 0x{id(obj):x}"


def tensor_guard(source: Source, t: torch.Tensor) -> Guard:
    return Guard("tensor", source, (t.dtype, tuple(t.shape), tuple(t.stride()), t.device,
                                    bool(t.requires_grad), int(t.storage_offset())))


@dataclass
class GuardSet:
    """The guards of one cache entry, in the order they were installed."""

    guards: list[Guard] = field(default_factory=list)
    _seen: set[tuple[str, str]] = field(default_factory=set)
    _check: Callable[[Any, Any], bool] | None = None

    def add(self, guard: Guard) -> None:
        key = (guard.kind, guard.source.expr() if guard.source is not None
               else repr(guard.expected))
        if key in self._seen:
            return
        self._seen.add(key)
        self.guards.append(guard)
        self._check = None

    def __len__(self) -> int:
        return len(self.guards)

    def describe(self) -> str:
        return "\n".join(f"  {g.describe()}" for g in self.guards)

    def check(self, state: Any, ctx: Any) -> bool:
        """True when every guard holds for ``state``/``ctx``."""
        if self._check is None:
            self._check = _compile(self.guards)
        return self._check(state, ctx)

    def failure_text(self, state: Any, ctx: Any) -> str:
        """The first failing guard, with the value seen (``x.shape == (3, 5) (got
        (4, 5))``), for recompile logs and the recompile-limit warning."""
        guard = self.first_failure(state, ctx)
        if guard is None:
            return "no guard failed"
        if guard.source is None:
            return guard.describe()
        try:
            actual = guard.source.fetch(state, ctx)
        except Exception as e:  # noqa: BLE001 - the failure itself is what we report
            return f"{guard.source.expr()} is missing ({type(e).__name__}: {e})"
        return _explain(guard, actual)

    def first_failure(self, state: Any, ctx: Any) -> Guard | None:
        """The first guard that fails (slow: checks them one at a time)."""
        for g in self.guards:
            if not _compile([g])(state, ctx):
                return g
        return None


def _compile(guards: list[Guard]) -> Callable[[Any, Any], bool]:
    names: dict[str, Any] = {"torch": torch}
    terms: list[str] = []
    for i, g in enumerate(guards):
        value = python_expr(g.source) if g.source is not None else ""
        if g.kind == "tensor":
            dtype, sizes, strides, device, rg, offset = g.expected
            names.update({f"d{i}": dtype, f"s{i}": sizes, f"st{i}": strides,
                          f"dv{i}": device})
            terms.append(
                f"(isinstance(v := {value}, torch.Tensor) and v.dtype is d{i} "
                f"and v.shape == s{i} and v.stride() == st{i} and v.device == dv{i} "
                f"and v.requires_grad is {rg} and v.storage_offset() == {offset})"
            )
        elif g.kind == "equals":
            names[f"c{i}"] = g.expected
            names[f"t{i}"] = type(g.expected)
            if isinstance(g.expected, float) and g.expected != g.expected:
                terms.append(f"(type(v := {value}) is t{i} and v != v)")  # NaN
            else:
                terms.append(f"(type(v := {value}) is t{i} and v == c{i})")
        elif g.kind == "distinct":
            exprs = ", ".join(f"id({python_expr(s)})" for s in g.expected)
            terms.append(f"(len({{{exprs}}}) == {len(g.expected)})")
        elif g.kind == "same":
            terms.append(f"({value} is {python_expr(g.expected)})")
        elif g.kind == "global":
            names[f"c{i}"] = g.expected[1]
            terms.append(f"({g.expected[0]} == c{i})")
        elif g.kind == "id":
            names[f"o{i}"] = g.expected
            terms.append(f"({value} is o{i})")
        elif g.kind == "type":
            names[f"t{i}"] = g.expected
            terms.append(f"(type({value}) is t{i})")
        elif g.kind == "len":
            terms.append(f"(len({value}) == {int(g.expected)})")
        elif g.kind == "keys":
            names[f"k{i}"] = list(g.expected)
            terms.append(f"(list({value}.keys()) == k{i})")
        elif g.kind == "grad_mode":
            terms.append(f"(torch.is_grad_enabled() is {bool(g.expected)})")
        else:
            raise ValueError(f"unknown guard kind {g.kind!r}")
    body = " and\n            ".join(terms) if terms else "True"
    src = (
        "def check(S, C):\n"
        "    try:\n"
        f"        return bool({body})\n"
        "    except Exception:\n"
        "        return False\n"
    )
    exec(compile(src, "<ember guards>", "exec"), names)  # noqa: S102 - generated from guards
    fn: Callable[[Any, Any], bool] = names["check"]
    return fn


def _explain(guard: Guard, actual: Any) -> str:
    where = guard.source.expr() if guard.source is not None else ""
    if guard.kind == "tensor":
        if not isinstance(actual, torch.Tensor):
            return f"{where} is a Tensor (got {type(actual).__name__})"
        dtype, sizes, strides, device, rg, offset = guard.expected
        checks = [("dtype", dtype, actual.dtype), ("shape", sizes, tuple(actual.shape)),
                  ("stride()", strides, tuple(actual.stride())),
                  ("device", device, actual.device),
                  ("requires_grad", rg, actual.requires_grad),
                  ("storage_offset()", offset, actual.storage_offset())]
        for name, want, got in checks:
            if want != got:
                return f"{where}.{name} == {want} (got {got})"
    if guard.kind == "equals":
        return f"{where} == {guard.expected!r} (got {actual!r})"
    if guard.kind == "len":
        return f"len({where}) == {guard.expected} (got {len(actual)})"
    if guard.kind == "type":
        return f"type({where}) is {guard.expected.__qualname__} (got {type(actual).__qualname__})"
    return guard.describe()
