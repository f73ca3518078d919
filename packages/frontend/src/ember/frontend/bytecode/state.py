"""Rebuilding Python state after a graph runs: deriving recipes and side-effect replays.

At the end of a segment the interpreter's frame holds fake tensors, lists and dicts it
created, functions it made, iterators, and outside objects. A recipe
(:mod:`.recipes`) describes how to produce the real value at run time from the graph's
outputs (``Out``), the segment's start state (``Fetch`` through a source), constants, or
fresh containers. :class:`StateBuilder` derives the recipes (and the list of graph
outputs) from the frame; ``Replay`` entries write the captured mutations of outside
lists, dicts, attributes and cells back to the real objects, in the order: replays
first, then the state.
"""

from __future__ import annotations

import collections
import functools
import gc
import inspect
import types
from typing import Any

import torch
from ember.frontend._torch import fake_tensor_limitation_types, has_unbacked_symbols
from ember.frontend.autocast import AutocastRestore
from ember.frontend.bytecode.attributes import dict_shadow
from ember.frontend.bytecode.capture import PRIMITIVES, CaptureContext, is_traced_array
from ember.frontend.bytecode.exception_ops import ProfilerRangeExit
from ember.frontend.bytecode.frame import _Marker
from ember.frontend.bytecode.generators import LazyIterator
from ember.frontend.bytecode.interpreter import GradModeRestore, is_fake_tensor
from ember.frontend.bytecode.iteration import ResumedIterator
from ember.frontend.bytecode.list_iterator import ListIterator
from ember.frontend.bytecode.recipes import (
    SIZE_KINDS,
    Const,
    Fetch,
    New,
    Out,
    Rebuild,
    Recipe,
    Replay,
    SizedBy,
    SizeExpr,
    StartCell,
    Unrebuildable,
    substituted,
)
from ember.frontend.bytecode.side_effects import DELETED
from ember.frontend.bytecode.sources import Source
from ember.runtime.logs import log
from torch import nn

__all__ = ["Const", "Fetch", "New", "Out", "Rebuild", "Recipe", "Replay", "StartCell",
           "StateBuilder", "Unrebuildable", "holds_fake"]


_STABLE = (nn.Module, types.FunctionType, types.BuiltinFunctionType, types.ModuleType, type,
           types.MethodDescriptorType, types.WrapperDescriptorType, GradModeRestore,
           ProfilerRangeExit, AutocastRestore,
           torch.Size, _Marker, functools.partial, inspect.Signature, inspect.Parameter)


_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def specialised(value: torch.SymInt | torch.SymFloat | torch.SymBool) -> int | float | bool:
    """A symbolic number live at a graph break (``n = x.size(0)`` read after it), as a
    constant of the segment: the capture guards that it keeps this value (the symbols
    it reads become static), logged under ``EMBER_LOGS=dynamic``.

    Raises:
        Unrebuildable: it depends on a data-dependent (unbacked) size.
    """
    kind: type = int if isinstance(value, torch.SymInt) else (
        float if isinstance(value, torch.SymFloat) else bool)
    if has_unbacked_symbols(value):
        raise Unrebuildable(f"the data-dependent size {value} is live at the graph break")
    try:
        concrete: int | float | bool = kind(value)
    except fake_tensor_limitation_types() as e:
        raise Unrebuildable(f"the data-dependent size {value} is live at the graph break"
                            ) from e
    log("dynamic", f"specialised {value} = {concrete}: a symbolic value is live at a graph "
        "break (the segment after it gets it as a constant)")
    return concrete


def size_expression(value: Any, cap: CaptureContext) -> SizeExpr | None:
    """``value`` (a SymInt, SymFloat or SymBool) as a :class:`SizeExpr` over the
    symbolic sizes of the capture's inputs, when each of its symbols is one input
    dimension and substituting this call's sizes gives ``value``'s own value; else None
    (then it is specialised)."""
    kind = next((k for k, t in _SIZE_TYPES.items() if isinstance(value, t)), None)
    if kind is None:
        return None
    expr = value.node.expr
    wanted = {str(s) for s in expr.free_symbols}
    sizes: dict[str, tuple[str, Source, int]] = {}
    now: dict[str, int] = {}
    for symbolic_input, _ in cap.symbolic_inputs:
        fake = symbolic_input.fake
        for dim, size in enumerate(fake.shape if fake is not None else ()):
            if not isinstance(size, torch.SymInt) or not size.node.expr.is_Symbol:
                continue
            name = str(size.node.expr)
            if name in wanted and name not in sizes:
                sizes[name] = (name, symbolic_input.source, dim)
                now[name] = size.node.hint
    if set(sizes) != wanted or None in now.values():
        return None
    hint = value.node.hint  # NOTE: int(value) would guard it, specialising the symbols
    read = SIZE_KINDS[kind]
    try:
        if hint is None or read(substituted(expr, now)) != read(hint):
            return None
    except (TypeError, ValueError):  # not a number once substituted
        return None
    return SizeExpr(expr, list(sizes.values()), kind)


_SIZE_TYPES = {"int": torch.SymInt, "float": torch.SymFloat, "bool": torch.SymBool}


class StateBuilder:
    """Derives recipes for the values of a frame at the end of a segment."""

    def __init__(self, cap: CaptureContext, start_cells: dict[str, Any]) -> None:
        self.cap = cap
        self.outputs: list[torch.Tensor] = []
        self._out_index: dict[int, int] = {}
        self._memo: dict[int, Recipe] = {}
        self._start_cells = {id(c): name for name, c in start_cells.items()}
        self._keys = 0
        # the values of the frame state at the break (for _private_parts)
        self.state_roots: list[Any] = []

    def _key(self, v: Any) -> int:
        self._keys += 1
        return self._keys

    def _sized_by(self, v: torch.SymInt | torch.SymFloat | torch.SymBool) -> Recipe:
        """A symbolic number over data-dependent sizes, read after the graph from the
        sizes of values that have them (the graph returns such a value if nothing else
        does: ``nonzero``'s result for its row count).

        Raises:
            Unrebuildable: a symbol no recorded tensor has as a size (an ``.item()``).
        """
        sizes: list[tuple[str, Recipe, int]] = []
        for symbol in sorted(v.node.expr.free_symbols, key=str):
            carrier = self.cap.recorder.tensor_sized_by(symbol)
            if carrier is None:
                raise Unrebuildable(f"the data-dependent value {v} is live at the graph "
                                    f"break, and no tensor of the graph has {symbol} as "
                                    "a size")
            sizes.append((str(symbol), self.recipe(carrier[0]), carrier[1]))
        kind = next(k for k, t in _SIZE_TYPES.items() if isinstance(v, t))
        log("dynamic", f"{v} is live at a graph break: read after the graph from "
            f"{', '.join(f'dim {dim} of a value with size {name}' for name, _, dim in sizes)}")
        return SizedBy(v.node.expr, sizes, kind)

    def recipe(self, v: Any) -> Recipe:
        cap = self.cap
        if isinstance(v, (*PRIMITIVES, _Marker)):
            return Const(v)
        if isinstance(v, _SYMBOLIC):
            from_sizes = size_expression(v, cap)
            if from_sizes is not None:
                return from_sizes
            if has_unbacked_symbols(v):
                return self._sized_by(v)
            return Const(specialised(v))
        if id(v) in self._memo:
            return self._memo[id(v)]
        if cap.new_classes and (id(v) in cap.new_classes or id(type(v)) in cap.new_classes):
            # Python makes a new class at every call (.class_ops)
            what = "class" if id(v) in cap.new_classes else f"{type(v).__qualname__} object"
            raise Unrebuildable(f"a {what} defined by a class statement in the compiled code "
                                "is live after the graph")
        if isinstance(v, torch.Tensor):
            source = cap.is_input_fake(v)
            if source is not None:
                return Fetch(source)
            if not is_fake_tensor(v):
                return Const(v)
            if id(v) not in self._out_index:
                self._out_index[id(v)] = len(self.outputs)
                self.outputs.append(v)
            return Out(self._out_index[id(v)])
        shadow = cap.shadows.get(id(v))
        if shadow is not None:
            return Fetch(shadow.source)
        source = cap.source_of(v)
        if source is not None:
            return Fetch(source)
        if is_traced_array(v):  # a real np.ndarray after the graph (numpy_values.py)
            from ember.frontend.bytecode.numpy_values import array_recipe

            return array_recipe(self, v)
        if isinstance(v, types.CellType):
            if id(v) in self._start_cells:
                return StartCell(self._start_cells[id(v)])
            if id(v) not in cap.new_cells:
                return Const(v)
            r = New("cell", self._key(v), [])
            self._memo[id(v)] = r
            try:
                r.parts = [self.recipe(v.cell_contents)]
            except ValueError:
                pass
            return r
        if isinstance(v, tuple):
            parts = [self.recipe(x) for x in v]
            if all(isinstance(p, Const) for p in parts):
                if any(isinstance(x, _SYMBOLIC) for x in v):  # torch.Size of symbols
                    return Const(type(v)(p.value for p in parts if isinstance(p, Const)))
                return Const(v)
            return New("tuple", self._key(v), parts, type(v))
        if isinstance(v, list):
            r = New("list", self._key(v), [])
            self._memo[id(v)] = r
            r.parts = [self.recipe(x) for x in v]
            return r
        if isinstance(v, dict) and (type(v) is dict or type(v).__module__ == "collections"):
            r = New("dict", self._key(v), [], type(v))
            self._memo[id(v)] = r
            factory = getattr(v, "default_factory", None)
            r.parts = [self.recipe(factory),
                       *((self.recipe(k), self.recipe(x)) for k, x in v.items())]
            return r
        if isinstance(v, collections.deque):
            return New("deque", self._key(v), [self.recipe(list(v))], v.maxlen)
        if isinstance(v, functools.partial):
            return New("partial", self._key(v), [self.recipe(v.func), self.recipe(v.args),
                                                  self.recipe(dict(v.keywords))])
        if isinstance(v, set):
            return New("set", self._key(v), [self.recipe(x) for x in v])
        if isinstance(v, LazyIterator):
            if v.parts is not None and v.finite and self._private_parts(v):
                # zip(count(), xs) at a break in its loop: what is left, as a list (its
                # parts are seen by nothing else, and pulling from them runs no code)
                r = New("iter", self._key(v), [], 0)
                self._memo[id(v)] = r
                r.parts = [self.recipe(v.remaining())]
                return r
            raise Unrebuildable("a generator (or a lazy iterator over one) is suspended at "
                                "the break")
        if isinstance(v, ResumedIterator):  # the start state's iterator, advanced
            r = New("advance", self._key(v), [Fetch(v.source)], v.consumed)
            self._memo[id(v)] = r
            return r
        if isinstance(v, ListIterator):
            r = New("iter", self._key(v), [], v.position)
            self._memo[id(v)] = r
            r.parts = [self.recipe(v.item_list)]
            return r
        if isinstance(v, slice):
            return New("slice", self._key(v),
                       [self.recipe(v.start), self.recipe(v.stop), self.recipe(v.step)])
        if isinstance(v, types.FunctionType) and _made_during_capture(cap.new_functions, v):
            # NOTE: the function's own globals (its module's), not the compiled
            # function's: a function made inside an inlined call of another module
            # (Triton's kernel[grid] launcher) looks its globals up there
            r = New("function", self._key(v), [],
                    (v.__code__, v.__name__, v.__qualname__, v.__globals__))
            self._memo[id(v)] = r
            r.parts = [self.recipe(v.__defaults__), self.recipe(v.__kwdefaults__),
                       self.recipe(v.__closure__)]
            return r
        if isinstance(v, types.FunctionType) and v.__closure__ and _made_during_capture(
                cap.made, v):
            raise Unrebuildable(f"function {v.__qualname__} made by library code run for "
                                "real (its closure would be a constant of the first call)")
        if isinstance(v, types.MethodType):
            return New("method", self._key(v), [self.recipe(v.__self__)], v.__func__)
        if isinstance(v, types.BuiltinMethodType) and not isinstance(
                getattr(v, "__self__", None), (types.ModuleType, type(None))):
            return New("builtin_method", self._key(v), [self.recipe(v.__self__)], v.__name__)
        if isinstance(v, (*_STABLE, torch.dtype, torch.device)) and id(v) not in cap.new_objects:
            return Const(v)  # (a module made by the captured code is re-created below)
        if isinstance(v, BaseException) and (id(v) in cap.new_objects or id(v) in cap.made):
            return New("exception", self._key(v), [self.recipe(v.args),
                                                   self.recipe(dict(vars(v)))], type(v))
        if id(v) in cap.new_objects or (id(v) in cap.made and _rebuildable_object(v)
                                        and holds_fake(v)):
            r = New("object", self._key(v), [], type(v))
            self._memo[id(v)] = r
            items = list(dict.items(v)) if isinstance(v, dict) else []
            r.parts = [[(self.recipe(k), self.recipe(x)) for k, x in items],
                       [(self.recipe(k), self.recipe(x)) for k, x in vars(v).items()]]
            return r
        made = cap.constructed.get(id(v))
        if made is not None and made[0] is v:
            # constructed again after the graph: eager makes a new one at every call
            _, cls, args, kwargs = made
            r = New("call", self._key(v), [self.recipe(args), self.recipe(kwargs)], cls)
            self._memo[id(v)] = r
            return r
        if id(v) in cap.made and hasattr(type(v), "__next__"):
            raise Unrebuildable(f"a {type(v).__qualname__} iterator made during capture "
                                "(its position is not a constant)")
        if holds_fake(v):
            raise Unrebuildable(f"a {type(v).__qualname__} object holds tensors of the "
                                "graph")
        # NOTE: an object that existed before this capture and was reached without a
        # source (e.g. through a class attribute) is reused as it is.
        return Const(v)

    def replays(self) -> list[Replay]:
        cap = self.cap
        out: list[Replay] = []
        for shadow in cap.shadows.values():
            copy = shadow.copy
            if isinstance(copy, list):
                changed = len(copy) != len(shadow.initial) or any(
                    a is not b for a, b in zip(copy, shadow.initial))
                if changed:
                    out.append(Replay("list", Fetch(shadow.source),
                                      [self.recipe(x) for x in copy]))
            else:
                items = list(copy.items())
                changed = len(items) != len(shadow.initial) or any(
                    not _same_key(a[0], b[0]) or a[1] is not b[1]
                    for a, b in zip(items, shadow.initial))
                if changed:
                    out.append(Replay("dict", Fetch(shadow.source),
                                      [(self.recipe(k), self.recipe(x)) for k, x in items]))
        for write in cap.attr_writes.values():
            if dict_shadow(cap, write.obj, write.name) is not None:
                continue  # the replay of its __dict__ (above) carries this write
            source = cap.source_of(write.obj)
            if source is None:
                source = cap.is_input_fake(write.obj)  # a graph input's .grad
            if source is None and is_fake_tensor(write.obj):
                continue  # a tensor the graph made: made_tensor_replays
            if source is None and _made_during_capture(cap.made, write.obj):
                # made by library code run for real during this capture: eager makes a
                # new one at every call, which a replay on this one would not be
                raise Unrebuildable(f"a {type(write.obj).__qualname__} object made by "
                                    "library code during capture was written to")
            target: Recipe = Const(write.obj) if source is None else Fetch(source)
            if write.value is DELETED:
                out.append(Replay("delattr", target, None, write.name, write.raw))
            else:
                out.append(Replay("attr", target, self.recipe(write.value), write.name,
                                  write.raw))
        for g in cap.global_writes.values():
            out.append(Replay("global", Const(g.globals), self.recipe(g.value), g.name))
        for c in cap.cell_writes.values():
            target = self.recipe(c.cell) if id(c.cell) in self._start_cells else Const(c.cell)
            out.append(Replay("cell", target, self.recipe(c.value)))
        return out

    def _private_parts(self, v: LazyIterator) -> bool:
        """Whether every iterator ``v`` pulls from (through its parts) is reached once in
        the frame state (``state_roots``): through ``v`` alone."""
        seen: dict[int, int] = {}
        todo = list(self.state_roots)
        while todo:
            item = todo.pop()
            seen[id(item)] = seen.get(id(item), 0) + 1
            if seen[id(item)] > 1:
                continue
            if isinstance(item, (list, tuple, set, frozenset)):
                todo.extend(item)
            elif isinstance(item, dict):
                todo.extend(item.values())
            elif isinstance(item, LazyIterator) and item.parts is not None:
                todo.extend(item.parts)
            elif isinstance(item, ListIterator):
                todo.append(item.item_list)
            elif id(item) in self.cap.new_objects and isinstance(
                    getattr(item, "__dict__", None), dict):
                todo.extend(vars(item).values())
        parts, stack = [], list(v.parts or ())
        while stack:
            part = stack.pop()
            parts.append(part)
            if isinstance(part, LazyIterator):
                stack.extend(part.parts or ())
        return all(seen.get(id(p), 0) == 1 for p in parts)

    def made_tensor_replays(self) -> list[Replay]:
        """Attribute writes (``.grad``, ``t.tag = 1``) on tensors the graph made, for
        those seen after it: called once every other recipe is made, each becomes a
        write on the graph output that the tensor is (:mod:`.tensor_attributes`). A
        written value may make another tensor an output: repeated until none does."""
        cap = self.cap
        out: list[Replay] = []
        done: set[tuple[int, str]] = set()
        while True:
            todo = [(key, w) for key, w in cap.attr_writes.items()
                    if key not in done and id(w.obj) in self._out_index
                    and is_fake_tensor(w.obj) and cap.is_input_fake(w.obj) is None]
            if not todo:
                return out
            for key, write in todo:
                done.add(key)
                target = Out(self._out_index[id(write.obj)])
                if write.value is DELETED:
                    out.append(Replay("delattr", target, None, write.name))
                else:
                    out.append(Replay("attr", target, self.recipe(write.value), write.name))


def _same_key(a: Any, b: Any) -> bool:
    """Dict keys ``a`` and ``b`` are the same (tensor keys, as in ``optimizer.state``,
    by identity: ``==`` would compare their elements)."""
    return a is b or (not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor)
                      and bool(a == b))


def _rebuildable_object(v: Any) -> bool:
    """An instance of a plain Python class (``__dict__`` state, default ``__new__``):
    ``New("object")`` can re-create it from its attributes."""
    cls = type(v)
    return (isinstance(getattr(v, "__dict__", None), dict) and getattr(cls, "__new__", None) is object.__new__
            and not any("__slots__" in vars(k) for k in cls.__mro__[:-1]))


def holds_fake(v: Any, limit: int = 2000) -> bool:
    """Whether a fake tensor is reachable from ``v`` (through containers, attributes and
    the references of C objects such as iterators), looking at ``limit`` objects at most."""
    seen: set[int] = set()
    todo = [v]
    while todo and len(seen) < limit:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (*PRIMITIVES, type, types.ModuleType,
                                               types.CodeType, nn.Module)):
            continue
        seen.add(id(obj))
        if is_fake_tensor(obj):
            return True
        if isinstance(obj, torch.Tensor):
            continue
        if isinstance(obj, types.FunctionType):  # not its globals
            todo.extend([obj.__closure__, obj.__defaults__, obj.__kwdefaults__])
            continue
        todo.extend(gc.get_referents(obj))
    return False


def _made_during_capture(made: dict[int, Any], fn: types.FunctionType) -> bool:
    """Whether the captured code made ``fn`` (by identity, never by a reused id)."""
    return made.get(id(fn)) is fn
