"""Recipes: how a value of the frame is produced at run time after a graph runs, and
replays of the captured side effects.

A :class:`Recipe` builds the real value from the graph's outputs (:class:`Out`), the
segment's start state (:class:`Fetch` through a source), constants (:class:`Const`),
sizes of the inputs (:class:`SizeExpr`) or of data-dependent sizes (:class:`SizedBy`),
start cells, or fresh containers and objects (:class:`New`); a :class:`Replay` writes
one captured mutation back to a real object. :class:`~.state.StateBuilder` derives them.
"""

from __future__ import annotations

import collections
import functools
import types
from dataclasses import dataclass
from typing import Any

from ember.frontend.bytecode.list_iterator import ListIterator
from ember.frontend.bytecode.sources import Source


class Unrebuildable(Exception):
    """A value in the frame has no recipe (an object created during capture that Ember
    cannot re-create)."""


class EagerState(Unrebuildable):
    """A value of the frame state at a resume point that no graph may read (a tensor
    whose subclass overrides ``__torch_function__``, :mod:`ember.frontend.tensor_subclasses`):
    that resume point runs eagerly. The message is the reason."""


class Rebuild:
    """Run-time inputs of the recipes: graph outputs, start state, context, memo;
    ``fetched``: the start-state values read before any replay (:func:`prefetch`)."""

    def __init__(self, outs: list[Any], state: Any, ctx: Any) -> None:
        self.outs, self.state, self.ctx = outs, state, ctx
        self.memo: dict[int, Any] = {}
        self.fetched: dict[int, Any] = {}


class Recipe:
    def build(self, rt: Rebuild) -> Any:
        raise NotImplementedError


@dataclass
class Const(Recipe):
    value: Any

    def build(self, rt: Rebuild) -> Any:
        return self.value


@dataclass
class Out(Recipe):
    index: int

    def build(self, rt: Rebuild) -> Any:
        return rt.outs[self.index]


@dataclass
class Fetch(Recipe):
    source: Source

    def build(self, rt: Rebuild) -> Any:
        found = rt.fetched.get(id(self), _UNSET) if rt.fetched else _UNSET
        return self.source.fetch(rt.state, rt.ctx) if found is _UNSET else found


_UNSET = object()


def fetches_in(recipes: Any) -> list[Fetch]:
    """Every :class:`Fetch` in ``recipes`` (recipes, the values of replays, and lists,
    tuples and dicts of them, as ``New.parts`` holds them), each once."""
    found: dict[int, Fetch] = {}
    todo = [recipes]
    while todo:
        item = todo.pop()
        if isinstance(item, Fetch):
            found.setdefault(id(item), item)
        elif isinstance(item, New):
            todo.extend(item.parts)
        elif isinstance(item, Replay):
            todo.append(item.value)  # its target is resolved in order (see prefetch)
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
    return list(found.values())


def prefetch(fetches: list[Fetch], rt: Rebuild) -> None:
    """Read every start-state value of ``fetches`` now, before the replays write the
    captured mutations back. A ``Fetch`` is a read of the segment's start state: after
    ``first = items[0]; items.pop(0)``, reading ``items[0]`` once the list's replay ran
    gave the second item. The replays' targets are not read here but as each replay
    runs: a target can be an entry an earlier replay makes (a ``defaultdict``'s, whose
    early read would make a throwaway entry)."""
    for f in fetches:
        rt.fetched[id(f)] = f.source.fetch(rt.state, rt.ctx)


@dataclass
class SizeExpr(Recipe):
    """A Python number the captured code computed from symbolic sizes (``n = x.size(1) +
    1`` live after the graph, an HF cache's sequence length in a returned object),
    computed again at each call from the inputs' sizes: ``expr`` (sympy) over the symbols
    in ``sizes``, each ``(symbol name, source of an input tensor, dim)``; ``kind``:
    ``"int"``, ``"float"`` (``x.size(0) / 2``) or ``"bool"`` (``x.size(0) > 4``)."""

    expr: Any
    sizes: list[tuple[str, Source, int]]
    kind: str = "int"

    def build(self, rt: Rebuild) -> Any:
        values = {name: int(source.fetch(rt.state, rt.ctx).size(dim))
                  for name, source, dim in self.sizes}
        return SIZE_KINDS[self.kind](substituted(self.expr, values))


@dataclass
class SizedBy(Recipe):
    """A Python number the captured code computed from data-dependent sizes, live at a
    graph break (``any_left = tokens.numel() > 0`` after ``tokens = nonzero(...)``):
    ``expr`` (sympy) over symbols each read at run time from a dimension of a value the
    segment rebuilds (a graph output, or an input): ``(symbol name, recipe, dim)``;
    ``kind`` as :class:`SizeExpr`'s."""

    expr: Any
    sizes: list[tuple[str, Recipe, int]]
    kind: str = "int"

    def build(self, rt: Rebuild) -> Any:
        values = {name: int(recipe.build(rt).size(dim)) for name, recipe, dim in self.sizes}
        return SIZE_KINDS[self.kind](substituted(self.expr, values))


#: ``SizeExpr.kind`` -> the Python type its value is read as
SIZE_KINDS: dict[str, type] = {"int": int, "float": float, "bool": bool}


def substituted(expr: Any, values: dict[str, int]) -> Any:
    """``expr`` (sympy) with its symbols replaced by ``values`` (by name: the symbols
    carry assumptions, so ``Symbol(name)`` is not one of them)."""
    return expr.xreplace({s: values[str(s)] for s in expr.free_symbols if str(s) in values})


@dataclass
class StartCell(Recipe):
    """A cell of the segment's start state."""

    name: str

    def build(self, rt: Rebuild) -> Any:
        return rt.state.cells[self.name]


@dataclass
class New(Recipe):
    """A fresh object: ``kind`` in list/dict/set/tuple/cell/iter/advance (a start-state
    iterator moved on by ``extra`` items)/slice/function/method/builtin_method/exception/
    call (``extra(*args, **kwargs)``, a standard-library constructor called again);
    ``parts`` recipes; ``key`` for aliasing (one object per key)."""

    kind: str
    key: int
    parts: list[Any]
    extra: Any = None

    def build(self, rt: Rebuild) -> Any:
        if self.key in rt.memo:
            return rt.memo[self.key]
        k = self.kind
        if k == "list":
            obj: Any = []
            rt.memo[self.key] = obj
            obj.extend(p.build(rt) for p in self.parts)
        elif k == "dict":
            obj = self.extra()
            rt.memo[self.key] = obj
            if isinstance(obj, collections.defaultdict):
                obj.default_factory = self.parts[0].build(rt)
            for kr, vr in self.parts[1:]:
                obj[kr.build(rt)] = vr.build(rt)
        elif k == "object":
            obj = self.extra.__new__(self.extra)
            rt.memo[self.key] = obj
            items, attrs = self.parts
            if isinstance(obj, dict):
                # NOTE: bypass the class's __setitem__, but keep OrderedDict's key order
                set_item = (collections.OrderedDict.__setitem__
                            if isinstance(obj, collections.OrderedDict) else dict.__setitem__)
                for kr, vr in items:
                    set_item(obj, kr.build(rt), vr.build(rt))
            for kr, vr in attrs:
                obj.__dict__[kr.build(rt)] = vr.build(rt)
        elif k == "cell":
            obj = types.CellType()
            rt.memo[self.key] = obj
            if self.parts:
                obj.cell_contents = self.parts[0].build(rt)
        else:
            values = [p.build(rt) for p in self.parts]
            if k == "tuple":
                obj = self.extra(*values) if hasattr(self.extra, "_fields") else self.extra(values)
            elif k == "set":
                obj = set(values)
            elif k == "iter":
                obj = ListIterator(values[0], self.extra)
            elif k == "advance":
                obj = ListIterator(values[0].item_list, values[0].position + self.extra)
            elif k == "slice":
                obj = slice(*values)
            elif k == "method":
                obj = types.MethodType(self.extra, values[0])
            elif k == "builtin_method":
                obj = getattr(values[0], self.extra)
            elif k == "partial":
                obj = functools.partial(values[0], *values[1], **values[2])
            elif k == "call":  # a constructor called again (state.py)
                obj = self.extra(*values[0], **values[1])
            elif k == "deque":
                obj = collections.deque(values[0], self.extra)
            elif k == "exception":  # made by the captured code: a new one each call
                obj = self.extra.__new__(self.extra, *values[0])
                obj.args = values[0]
                obj.__dict__.update(values[1])
            elif k == "function":
                code, name, qualname, f_globals = self.extra
                defaults, kwdefaults, closure = values
                obj = types.FunctionType(code, f_globals, name, defaults, closure)
                obj.__kwdefaults__ = kwdefaults
                obj.__qualname__ = qualname
            else:
                raise AssertionError(k)
            rt.memo[self.key] = obj
        return obj


REPLAY_KINDS = frozenset({"list", "dict", "attr", "delattr", "cell", "global"})
"""What a :class:`Replay` may write back."""


@dataclass(frozen=True)
class Replay:
    """Write a captured mutation back: ``kind`` list/dict/attr/delattr/cell/global;
    ``raw`` attribute writes and deletes bypass the class's ``__setattr__`` /
    ``__delattr__`` (they were captured inside it)."""

    kind: str
    target: Recipe
    value: Any
    name: str = ""
    raw: bool = False

    def __post_init__(self) -> None:
        if self.kind not in REPLAY_KINDS:
            raise ValueError(f"unknown replay kind {self.kind!r}; known: "
                             f"{', '.join(sorted(REPLAY_KINDS))}")

    def apply(self, rt: Rebuild) -> None:
        obj = self.target.build(rt)
        if self.kind == "list":
            obj[:] = [r.build(rt) for r in self.value]
        elif self.kind == "dict":
            items = [(k.build(rt), v.build(rt)) for k, v in self.value]
            obj.clear()
            obj.update(items)
        elif self.kind == "attr":
            (object.__setattr__ if self.raw else setattr)(obj, self.name, self.value.build(rt))
        elif self.kind == "delattr":
            (object.__delattr__ if self.raw else delattr)(obj, self.name)
        elif self.kind == "cell":
            obj.cell_contents = self.value.build(rt)
        elif self.kind == "global":
            obj[self.name] = self.value.build(rt)

    def describe(self) -> str:
        return f"{self.kind} write {self.name}".strip()
