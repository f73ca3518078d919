"""Sources: where a value the captured code read came from, as an expression over the
frame state at the start of a segment (``S``) and the function's context (``C``).

Guards check values fetched through sources; graph inputs are fetched through them at
every call. ``expr()`` is valid Python, used both in the generated guard function and in
``EMBER_LOGS=guards`` output.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class Source:
    """Base class: ``expr()`` renders the access; ``fetch(S, C)`` performs it."""

    def expr(self) -> str:
        raise NotImplementedError

    def fetch(self, state: Any, ctx: Any) -> Any:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.expr()


@dataclass(frozen=True)
class LocalSource(Source):
    name: str

    def expr(self) -> str:
        return self.name

    def fetch(self, state: Any, ctx: Any) -> Any:
        return state.locals[self.name]


@dataclass(frozen=True)
class StackSource(Source):
    index: int

    def expr(self) -> str:
        return f"STACK[{self.index}]"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return state.stack[self.index]


@dataclass(frozen=True)
class CellSource(Source):
    """The contents of the frame's cell (or free variable) ``name``."""

    name: str

    def expr(self) -> str:
        return f"CELL[{self.name!r}]"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return state.cells[self.name].cell_contents


@dataclass(frozen=True)
class GlobalSource(Source):
    name: str

    def expr(self) -> str:
        return f"G[{self.name!r}]"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return ctx.f_globals[self.name]


@dataclass(frozen=True)
class AttrSource(Source):
    base: Source
    name: str

    def expr(self) -> str:
        return f"{self.base.expr()}.{self.name}"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return getattr(self.base.fetch(state, ctx), self.name)


@dataclass(frozen=True)
class ModuleMemberSource(Source):
    """Parameter, buffer or submodule ``name`` of the ``nn.Module`` at ``base``, read from
    its ``table`` (``_parameters``, ``_buffers`` or ``_modules``), where
    ``Module.__getattr__`` finds it, without that Python-level call (guards read every
    parameter of a model at every call). Shown as the attribute it is."""

    base: Source
    table: str
    name: str

    def expr(self) -> str:
        return f"{self.base.expr()}.{self.name}"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return getattr(self.base.fetch(state, ctx), self.table)[self.name]


@dataclass(frozen=True)
class ItemSource(Source):
    base: Source
    key: Any

    def expr(self) -> str:
        return f"{self.base.expr()}[{self.key!r}]"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return self.base.fetch(state, ctx)[self.key]


@dataclass(frozen=True)
class ClosureSource(Source):
    """Cell ``index`` of the closure of the function at ``base``."""

    base: Source
    index: int

    def expr(self) -> str:
        return f"{self.base.expr()}.__closure__[{self.index}].cell_contents"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return self.base.fetch(state, ctx).__closure__[self.index].cell_contents


@dataclass(frozen=True)
class DefaultSource(Source):
    """A default argument of the function at ``base`` (positional ``index`` or keyword)."""

    base: Source
    key: int | str

    def expr(self) -> str:
        if isinstance(self.key, int):
            return f"{self.base.expr()}.__defaults__[{self.key}]"
        return f"{self.base.expr()}.__kwdefaults__[{self.key!r}]"

    def fetch(self, state: Any, ctx: Any) -> Any:
        fn = self.base.fetch(state, ctx)
        if isinstance(self.key, int):
            return fn.__defaults__[self.key]
        return fn.__kwdefaults__[self.key]


def fetch_expr(source: Source, base_expr: Callable[[Source], str]) -> str:
    """The expression that fetches ``source``, its base rendered by ``base_expr`` (a
    full expression, or the name of a local that already holds the base)."""
    if isinstance(source, LocalSource):
        return f"S.locals[{source.name!r}]"
    if isinstance(source, StackSource):
        return f"S.stack[{source.index}]"
    if isinstance(source, CellSource):
        return f"S.cells[{source.name!r}].cell_contents"
    if isinstance(source, GlobalSource):
        return f"C.f_globals[{source.name!r}]"
    if isinstance(source, AttrSource):
        if source.name.isidentifier() and not keyword.iskeyword(source.name):
            return f"{base_expr(source.base)}.{source.name}"
        return f"getattr({base_expr(source.base)}, {source.name!r})"
    if isinstance(source, ModuleMemberSource):
        return f"{base_expr(source.base)}.{source.table}[{source.name!r}]"
    if isinstance(source, ItemSource):
        return f"{base_expr(source.base)}[{source.key!r}]"
    if isinstance(source, ClosureSource):
        return f"{base_expr(source.base)}.__closure__[{source.index}].cell_contents"
    if isinstance(source, DefaultSource):
        attr = "__defaults__" if isinstance(source.key, int) else "__kwdefaults__"
        return f"{base_expr(source.base)}.{attr}[{source.key!r}]"
    raise TypeError(f"no Python form for source {source!r}")


def attr_source(obj: Any, base: Source, name: str) -> Source:
    """The source of ``getattr(obj, name)`` for ``obj`` at ``base``: a
    :class:`ModuleMemberSource` when ``obj`` is an ``nn.Module`` whose ``__getattr__``
    supplies it (not an instance or class attribute), else an :class:`AttrSource`."""
    import torch

    if (isinstance(obj, torch.nn.Module) and name not in obj.__dict__
            and not hasattr(type(obj), name)):
        for table in ("_parameters", "_buffers", "_modules"):
            members = obj.__dict__.get(table)
            if isinstance(members, dict) and name in members:
                return ModuleMemberSource(base, table, name)
    return AttrSource(base, name)
