"""The stamp of the guards' fast path: what must hold for guards on a model's own state
to pass again without checking them one by one.

A guard is *stamp-safe* when every step of its source, from a root read every call
(``self``), is a plain read of a dict CPython versions (an instance ``__dict__``, a
module's ``_parameters``/``_buffers``/``_modules``, a dict item, an item of a
``ModuleList``/``Sequential``/``ModuleDict`` or of a subclass that keeps their item
reads, which reads ``_modules``) or of a tuple, through a type without
``__getattribute__`` and with no data descriptor of that name (``__class__`` through
``object``'s own: the type), and its check is on a leaf that cannot change without one
of those dicts changing (see :data:`LEAF_RULES`); a guard relating two sources (``a is
b``) needs both chains stamp-safe from the same root (:data:`SECOND_SOURCES`).
Properties, ``__getattr__`` fallbacks, custom ``__getattribute__`` (a HF config),
lists, bound methods, closures and globals are not stamp-safe: their guards are checked
every call.

A :class:`Stamp` records, after a call where every guard passed, the root object, the
type and ``__dict__`` of every object stepped through, the version tag of every dict
read (instance dicts, module tables, the class dicts of their types' MROs), the hook
dicts of ``no_hooks`` leaves and the tensors of ``tensor`` guards. While the root is the
same object, the types and dicts are the same, no version changed, the hook dicts are
empty and the tensors' metadata (one C++ check, plus storage offsets) is unchanged,
every stamp-safe guard passes: the same objects are read, and none changed.
"""

from __future__ import annotations

import enum
import gc
import operator
import types
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from ember.frontend._torch import dict_version_reader, tensor_metadata_checker
from ember.frontend.bytecode.sources import (
    AttrSource,
    CellSource,
    GlobalSource,
    ItemSource,
    LocalSource,
    LookupFails,
    MethodFuncSource,
    ModuleMemberSource,
)
from ember.frontend.containers import reads_items_as
from ember.frontend.guard_model import MODULE_HOOK_TABLES, Guard, Source
from ember.frontend.guard_writer import Matcher, MatcherWriter
from ember.runtime.logs import log

__all__ = ["LEAF_RULES", "SECOND_SOURCES", "STEP_SOURCES", "Needs", "NeedsFinder", "Stamp",
           "chain_of", "guard_needs"]

STEP_SOURCES = (AttrSource, ModuleMemberSource, ItemSource, LookupFails, MethodFuncSource)
"""The source steps a stamp may cover (each still needs its object to qualify;
``LookupFails``, whether a lookup raises, only as the last)."""
ROOT_SOURCES = (LocalSource, CellSource, GlobalSource)
"""The roots a stamped chain may start at (its object is compared by identity)."""

_DICTS = (dict, OrderedDict)
_CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)
_IMMUTABLE = (int, float, complex, bool, str, bytes, type(None), torch.dtype, torch.device,
              torch.layout, torch.memory_format)
_GENERIC_GETATTR: Any = object.__getattribute__
_HEAPTYPE = 1 << 9
_MODULE_GETATTR: Any = torch.nn.Module.__getattr__
_MODULE_TABLES = ("_parameters", "_buffers", "_modules")  # what Module.__getattr__ reads  # Py_TPFLAGS_HEAPTYPE: a class whose dict can be written


@dataclass
class Needs:
    """What a stamp holds for a set of guards: objects whose type must stay (by id),
    objects whose ``__dict__`` must stay the same dict, dicts whose version must stay,
    hook dicts that must stay empty, tensors whose metadata must stay."""

    typed: dict[int, Any] = field(default_factory=dict)
    dicted: dict[int, Any] = field(default_factory=dict)
    dicts: dict[int, Any] = field(default_factory=dict)
    hooks: dict[int, Any] = field(default_factory=dict)
    tensors: dict[int, torch.Tensor] = field(default_factory=dict)


def chain_of(source: Source) -> list[Source] | None:
    """``source``'s steps from its root (the root first), or None when a step or the
    root is not one a stamp may cover, or the source is a root itself."""
    steps: list[Source] = []
    s: Any = source
    while isinstance(s, STEP_SOURCES):
        steps.append(s)
        s = s.base
    if not steps or not isinstance(s, ROOT_SOURCES):
        return None
    steps.append(s)
    return steps[::-1]


def class_dicts(cls: type) -> list[dict[str, Any]]:
    """The writable dicts of ``cls``'s MRO (a class attribute set later bumps them)."""
    found = []
    for k in cls.__mro__:
        if k.__flags__ & _HEAPTYPE:
            (inner,) = (r for r in gc.get_referents(k.__dict__) if type(r) is dict)
            found.append(inner)
    return found


def _object_needs(obj: Any, needs: Needs) -> bool:
    """Stamp ``obj`` (type, ``__dict__`` and its version, its class dicts); False when
    attribute reads on it can run Python code or it has no ``__dict__``."""
    cls = type(obj)
    if getattr(cls, "__getattribute__", None) is not _GENERIC_GETATTR:
        return False
    attrs = getattr(obj, "__dict__", None)
    if type(attrs) is not dict:
        return False
    needs.typed[id(obj)] = obj
    needs.dicted[id(obj)] = obj
    needs.dicts[id(attrs)] = attrs
    for d in class_dicts(cls):
        needs.dicts[id(d)] = d
    return True


def _class_entry(cls: type, name: str) -> tuple[bool, Any]:
    for k in cls.__mro__:
        if name in k.__dict__:
            return True, k.__dict__[name]
    return False, None


def _is_data_descriptor(value: Any) -> bool:
    kind = type(value)
    return hasattr(kind, "__set__") or hasattr(kind, "__delete__")


_OBJECT_CLASS: Any = object.__dict__["__class__"]


def _attr_needs(obj: Any, name: Any, needs: Needs) -> bool:
    """A plain attribute read: from the instance dict, or a plain class attribute, or
    ``__class__`` through ``object``'s own descriptor (the type, which the stamp keeps)."""
    if type(name) is not str or not _object_needs(obj, needs):
        return False
    found, entry = _class_entry(type(obj), name)
    if name == "__class__":
        return entry is _OBJECT_CLASS
    if found and _is_data_descriptor(entry):
        return False
    if name in obj.__dict__:
        return True
    return found and not hasattr(type(entry), "__get__")


def _step_needs(step: Source, base: Any, needs: Needs) -> bool:
    if isinstance(step, AttrSource):
        return _attr_needs(base, step.name, needs)
    if isinstance(step, ModuleMemberSource):
        if not _attr_needs(base, step.table, needs):
            return False
        table = base.__dict__.get(step.table)
        if type(table) not in _DICTS or type(step.name) is not str:
            return False
        needs.dicts[id(table)] = table
        return True
    if isinstance(step, ItemSource):
        return _item_needs(base, step.key, needs)
    if isinstance(step, MethodFuncSource):
        return _method_needs(base, step.name, needs)
    if isinstance(step, LookupFails):
        if step.attribute:
            return _missing_attr_needs(base, step.key, needs)
        return _item_needs(base, step.key, needs)
    return False


def _method_needs(obj: Any, name: Any, needs: Needs) -> bool:
    """The function ``obj.name`` is bound to, when the instance and class dicts decide
    it: a bound method stored in the instance dict (its ``__func__`` cannot change), or
    a plain function of the class that no instance entry hides."""
    if type(name) is not str or not _object_needs(obj, needs):
        return False
    found, entry = _class_entry(type(obj), name)
    if found and _is_data_descriptor(entry):
        return False
    if name in obj.__dict__:
        return type(obj.__dict__[name]) is types.MethodType
    return found and type(entry) is types.FunctionType


def _missing_attr_needs(obj: Any, name: Any, needs: Needs) -> bool:
    """Whether ``hasattr(obj, name)`` is decided by versioned dicts alone: the instance
    and class dicts, and, through ``nn.Module.__getattr__``, the module's tables."""
    if type(name) is not str or not _object_needs(obj, needs):
        return False
    found, entry = _class_entry(type(obj), name)
    if found:
        return not hasattr(type(entry), "__get__")  # a descriptor may run code, or raise
    if name in obj.__dict__:
        return True
    getattr_hook = getattr(type(obj), "__getattr__", None)
    if getattr_hook is None:
        return True
    if getattr_hook is not _MODULE_GETATTR:
        return False
    return _table_dicts(obj, _MODULE_TABLES, needs.dicts)


def _table_dicts(obj: Any, tables: Sequence[str], into: dict[int, Any]) -> bool:
    """Record the plain dicts ``obj`` holds as ``tables`` in ``into`` (by id); False
    when one of them is missing or not a plain dict."""
    for table in tables:
        members = obj.__dict__.get(table)
        if type(members) not in _DICTS:
            return False
        into[id(members)] = members
    return True


def _item_needs(base: Any, key: Any, needs: Needs) -> bool:
    if type(key) not in (int, str):
        return False
    if type(base) in _DICTS:
        needs.dicts[id(base)] = base
        return True
    if type(base) is tuple:
        return True
    if _is_container(base):
        return _modules_needs(base, needs)
    return False


def _is_container(value: Any) -> bool:
    """A ``ModuleList``/``Sequential``/``ModuleDict``, or a subclass that reads its items
    and length as they do (a later override lands in a class dict the stamp versions)."""
    return reads_items_as(value, _CONTAINERS) is not None


def _modules_needs(container: Any, needs: Needs) -> bool:
    """A container module whose items and length are read from its ``_modules``."""
    if not _object_needs(container, needs):
        return False
    table = container.__dict__.get("_modules")
    if type(table) not in _DICTS:
        return False
    needs.dicts[id(table)] = table
    return True


def _immutable(value: Any) -> bool:
    if type(value) in _IMMUTABLE or isinstance(value, enum.Enum):
        return True
    if type(value) in (tuple, frozenset):
        return all(_immutable(v) for v in value)
    return False


def _equals_leaf(value: Any, needs: Needs) -> bool:
    return _immutable(value)


def _id_leaf(value: Any, needs: Needs) -> bool:
    return True


def _type_leaf(value: Any, needs: Needs) -> bool:
    needs.typed[id(value)] = value  # __class__ assignment writes no dict
    return True


def _len_leaf(value: Any, needs: Needs) -> bool:
    if type(value) in (tuple, str, bytes, frozenset):
        return True
    if type(value) in _DICTS:
        needs.dicts[id(value)] = value
        return True
    return _is_container(value) and _modules_needs(value, needs)


def _keys_leaf(value: Any, needs: Needs) -> bool:
    if type(value) in _DICTS:
        needs.dicts[id(value)] = value
        return True
    return False


def _no_hooks_leaf(value: Any, needs: Needs) -> bool:
    if not isinstance(value, torch.nn.Module) or not _object_needs(value, needs):
        return False
    return _table_dicts(value, MODULE_HOOK_TABLES, needs.hooks)


def _tensor_leaf(value: Any, needs: Needs) -> bool:
    if not isinstance(value, torch.Tensor):
        return False
    needs.tensors[id(value)] = value  # metadata re-checked every call, never skipped
    return True


LEAF_RULES: dict[str, Callable[[Any, Needs], bool]] = {
    # the value is the same object: an immutable one has the same value
    "equals": _equals_leaf,
    # the same object is the same object
    "id": _id_leaf,
    # the object's type is part of the stamp
    "type": _type_leaf,
    # tuple/str: immutable; dict: versioned; module container: its _modules versioned
    "len": _len_leaf,
    "keys": _keys_leaf,
    # the hook dicts stay empty (checked every call, in one C loop)
    "no_hooks": _no_hooks_leaf,
    # the tensor's metadata: one C++ check every call (.data =, requires_grad_ write no dict)
    "tensor": _tensor_leaf,
    # two sources read the same object (both chains stamped: see SECOND_SOURCES)
    "same": _id_leaf,
}
"""Guard kinds a stamp may cover, and what it needs of the guarded value (False: the
guard is checked every call)."""


SECOND_SOURCES: dict[str, Callable[[Guard], Source]] = {
    # `a is b`: both the same objects while the stamp holds
    "same": lambda g: g.expected,
}
"""Guard kinds that compare their source's value with a second source's, and that
source. The guard is stamp-safe when both chains are, from the same root."""


def guard_needs(guard: Guard, value_of: Callable[[Source], Any]) -> Needs | None:
    """What a stamp must hold for ``guard`` (its source's values read by ``value_of``),
    or None when it is not stamp-safe."""
    finder = NeedsFinder(value_of)
    return finder.needs if finder.add(guard) else None


class NeedsFinder:
    """What a stamp must hold for many guards whose sources are read by ``value_of`` on
    one call's objects, gathered into one :class:`Needs` (:attr:`needs`). Each step of
    their chains is decided once: the guards of one root share most of their steps
    (``self.encoder.layer[0]...``), and a 12-layer BERT has about 1,400 of them."""

    def __init__(self, value_of: Callable[[Source], Any]) -> None:
        self._value_of = value_of
        self.needs = Needs()
        self._steps: dict[int, bool] = {}  # by id: a source hashes its whole chain

    def add(self, guard: Guard) -> bool:
        """Whether ``guard`` is stamp-safe; its needs are added to :attr:`needs` (some of
        them also when it is not: a caller that keeps the needs takes all guards or
        none)."""
        rule = LEAF_RULES.get(guard.kind)
        chain = chain_of(guard.source) if guard.source is not None else None
        if rule is None or chain is None:
            return False
        second = SECOND_SOURCES.get(guard.kind)
        if second is not None:
            other = chain_of(second(guard))
            if other is None or other[0] != chain[0] or not self._chain(other):
                return False
        return self._chain(chain) and rule(self._value_of(chain[-1]), self.needs)

    def _chain(self, chain: list[Source]) -> bool:
        steps = self._steps  # the guards hold every step: their ids stay theirs
        for step in chain[1:]:
            ok = steps.get(id(step))
            if ok is None:
                base = self._value_of(step.base)  # type: ignore[attr-defined]
                ok = steps[id(step)] = _step_needs(step, base, self.needs)
            if not ok:
                return False
        return True


_getdict = operator.attrgetter("__dict__")
_offset: Any = torch.Tensor.storage_offset
_RECORDS_WITHOUT_HIT = 3


class Stamp:
    """The stamp of one root's stamp-safe guards: :meth:`holds` on the root object is
    True when they pass without being checked; :meth:`record` takes it after a call
    where every guard passed (``sources``/``values``: the locals the full check read),
    once the guards, checked again after the stamp is read, read the same objects.
    Off (never holds) after three records without a hit in between (state that changes
    every call) or when the stamp cannot be taken; logged under ``guards``.

    ``hits``: calls it answered; ``records``: stamps taken. ``keep``: the values of the
    full check's locals that later checks and the graph inputs read. ``ids``: the ids of
    the values at the indexes :meth:`watch` named, as the stamp was taken (a ``distinct``
    guard checks its other sources against them)."""

    def __init__(self, root: Source, guards: Sequence[Guard], sources: Sequence[Source]
                 ) -> None:
        self.root_source = root
        self.guards = list(guards)
        self.sources = list(sources)
        self.kept: list[int] = []  # set by the writer once it knows what later lines read
        self.keep: tuple[Any, ...] = ()
        self.hits = 0
        self.records = 0
        self.off = False
        self._streak = 0
        self._root: Any = None
        self._recheck: Matcher | None = None
        self._watched: list[int] = []
        self._clear()

    def watch(self, indexes: Sequence[int]) -> None:
        """Keep the ids of the values at ``indexes`` of :attr:`sources` in :attr:`ids`."""
        self._watched.extend(indexes)

    def _clear(self) -> None:
        self._root = _UNSET
        self.ids: frozenset[int] = frozenset()
        self._typed: list[Any] = []
        self._types: list[type] = []
        self._dicted: list[Any] = []
        self._objdicts: list[Any] = []
        self._dicts: list[Any] = []
        self._versions: list[int] = []
        self._hooks: list[Any] = []
        self._tensors: list[torch.Tensor] = []
        self._offsets: list[int] = []
        self._tcheck: Callable[..., bool] = _true

    def holds(self, root: Any) -> bool:
        """Whether every stamp-safe guard of this root passes (see the module doc)."""
        try:
            held = (root is self._root and list(map(type, self._typed)) == self._types
                    and list(map(_getdict, self._dicted)) == self._objdicts
                    and list(map(_VERSION, self._dicts)) == self._versions
                    and not any(self._hooks) and self._tcheck(*self._tensors)
                    and list(map(_offset, self._tensors)) == self._offsets)
        except Exception:  # noqa: BLE001 - e.g. a __dict__ deleted: the full check decides
            return False
        if held:
            self.hits += 1
            self._streak = 0
        return held

    def record(self, state: Any, ctx: Any, root: Any, values: tuple[Any, ...]) -> None:
        """Take the stamp after a call on ``(state, ctx)`` where every guard passed
        (``root``, ``values``: what the full check read); never raises."""
        if self.off:
            return
        self._streak += 1
        if self._streak > _RECORDS_WITHOUT_HIT:
            self._turn_off(f"{_RECORDS_WITHOUT_HIT} stamps taken with no call answered "
                           "(state on its path changes every call)")
            return
        try:
            self._take(state, ctx, root, values)
        except Exception as e:  # noqa: BLE001 - the full check stays correct without it
            self._turn_off(f"taking it raised {type(e).__name__}: {e}")

    def _take(self, state: Any, ctx: Any, root: Any, values: tuple[Any, ...]) -> None:
        self._clear()
        known: dict[Source, Any] = dict(zip(self.sources, values))
        known[self.root_source] = root
        finder = NeedsFinder(known.__getitem__)
        for g in self.guards:
            if not finder.add(g):
                self._turn_off(f"{g.describe()} is no longer stamp-safe")
                return
        needs = finder.needs
        tensors = list(needs.tensors.values())
        check = tensor_metadata_checker(tensors) if tensors else _true
        self._typed = list(needs.typed.values())
        self._types = list(map(type, self._typed))
        self._dicted = list(needs.dicted.values())
        self._objdicts = list(map(_getdict, self._dicted))
        self._dicts = list(needs.dicts.values())
        self._versions = list(map(_VERSION, self._dicts))
        self._hooks = list(needs.hooks.values())
        self._tensors = tensors
        self._offsets = list(map(_offset, tensors))
        self._tcheck = check if check is not None else _python_tensor_check(tensors)
        # NOTE: the guards are checked again AFTER the versions are read, and must read
        # the same objects: code run by the later checks of the call (a property, a
        # config's __getattribute__) may have written the state these guards read
        again = self._check_again(state, ctx)
        if again is None or len(again) != len(values) + 1 or any(
                a is not b for a, b in zip(again, (root, *values))):
            self._clear()
            return
        self.keep = tuple(values[i] for i in self.kept)
        self.ids = frozenset(id(values[i]) for i in self._watched)
        self._root = root
        self.records += 1

    def _check_again(self, state: Any, ctx: Any) -> list[Any] | None:
        if self._recheck is None:
            w = MatcherWriter()
            for g in self.guards:
                w.guard(g)
            read = ", ".join(w.ref(s) for s in (self.root_source, *self.sources))
            self._recheck, _ = w.finish(w.lines, f"[{read}]")
        return self._recheck(state, ctx)

    def _turn_off(self, why: str) -> None:
        self.off = True
        self._clear()
        log("guards", lambda: f"guard fast path off for {self.root_source.expr()}: {why}; "
                              "its guards are checked every call")

    def describe(self) -> str:
        """One line: how many guards of which kinds the stamp covers."""
        kinds: dict[str, int] = {}
        for g in self.guards:
            kinds[g.kind] = kinds.get(g.kind, 0) + 1
        shown = ", ".join(f"{k} {n}" for k, n in kinds.items())
        return (f"stamp of {self.root_source.expr()!r}: {len(self.guards)} guards "
                f"({shown}) skipped while it holds")


class _Unset:
    pass


_UNSET = _Unset()


def _true(*args: Any) -> bool:
    return True


_meta = operator.attrgetter("dtype", "shape", "device", "requires_grad")


def _python_tensor_check(tensors: list[torch.Tensor]) -> Callable[..., bool]:
    """The tensor metadata check where torch's C++ one is not available (slower)."""
    types = list(map(type, tensors))
    metas = list(map(_meta, tensors))
    strides = [t.stride() for t in tensors]

    def check(*ts: torch.Tensor) -> bool:
        return (list(map(type, ts)) == types and list(map(_meta, ts)) == metas
                and [t.stride() for t in ts] == strides)

    return check


def _version_unavailable(d: Any) -> int:
    raise RuntimeError("dict versions are not available")


_VERSION: Callable[[Any], int] = dict_version_reader() or _version_unavailable
