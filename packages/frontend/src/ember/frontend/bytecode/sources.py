"""Sources: where a value the captured code read came from, as an expression over the
frame state at the start of a segment (``S``) and the function's context (``C``).

Guards check values fetched through sources; graph inputs are fetched through them at
every call. ``expr()`` renders a source for people (``EMBER_LOGS=guards``, messages); it
is never executed: the generated guard function reads sources through ``fetch_code``,
with every key and name as a constant (:mod:`ember.frontend.guards`). The base class
:class:`~ember.frontend.guard_model.Source` is shared with the tracing capture.
"""

from __future__ import annotations

import keyword
import sys
from dataclasses import dataclass
from typing import Any

from ember.frontend.guard_model import CodeWriter, Source, index_code

__all__ = ["AttrSource", "CellSource", "ClosureSource", "DefaultSource", "DictValueSource",
           "GlobalSource", "ItemSource", "IterItemSource", "LocalSource", "LookupFails",
           "MethodFuncSource", "ModuleGlobalSource", "ModuleMemberSource",
           "RefTargetSource", "SliceSource", "Source", "StackSource", "TensorKeySource",
           "attr_source", "imported_module_source", "lookup_fails", "method_source"]

_MODULE_TABLES = ("_parameters", "_buffers", "_modules")


@dataclass(frozen=True)
class LocalSource(Source):
    name: str

    def expr(self) -> str:
        return self.name

    def fetch(self, state: Any, ctx: Any) -> Any:
        return state.locals[self.name]

    def fetch_code(self, w: CodeWriter) -> str:
        return f"S.locals[{w.const('name', self.name)}]"


@dataclass(frozen=True)
class StackSource(Source):
    index: int

    def expr(self) -> str:
        return f"STACK[{self.index}]"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return state.stack[self.index]

    def fetch_code(self, w: CodeWriter) -> str:
        return f"S.stack[{index_code(self.index)}]"


@dataclass(frozen=True)
class CellSource(Source):
    """The contents of the frame's cell (or free variable) ``name``."""

    name: str

    def expr(self) -> str:
        return f"CELL[{self.name!r}]"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return state.cells[self.name].cell_contents

    def fetch_code(self, w: CodeWriter) -> str:
        return f"S.cells[{w.const('name', self.name)}].cell_contents"


@dataclass(frozen=True)
class GlobalSource(Source):
    name: str

    def expr(self) -> str:
        return f"G[{self.name!r}]"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return ctx.f_globals[self.name]

    def fetch_code(self, w: CodeWriter) -> str:
        return f"C.f_globals[{w.const('name', self.name)}]"


@dataclass(frozen=True)
class ModuleGlobalSource(Source):
    """Global ``name`` of the imported module ``module`` (``sys.modules[module]``): a
    global read by a function inlined from another module that the capture reached
    without a source for the function itself (a forward hook defined in a library,
    called from ``Module.__call__``). The check function reads it from that module's
    globals dict, a constant of its namespace."""

    module: str
    name: str

    def expr(self) -> str:
        return f"globals({self.module!r})[{self.name!r}]"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return vars(sys.modules[self.module])[self.name]

    def fetch_code(self, w: CodeWriter) -> str:
        module = sys.modules.get(self.module)
        if module is None:  # not imported (yet): fetch() raises, the guard fails
            return super().fetch_code(w)
        return f"{w.const('globals', vars(module))}[{w.const('name', self.name)}]"


def imported_module_source(name: str) -> Source:
    """``sys.modules[name]``: a module the code imported (``import m``,
    ``importlib.import_module``), read at every call like a module global: its
    attributes are guarded where read (they were constants of the first call)."""
    return ItemSource(ModuleGlobalSource("sys", "modules"), name)


@dataclass(frozen=True)
class AttrSource(Source):
    base: Source
    name: str

    def expr(self) -> str:
        return f"{self.base.expr()}.{self.name}"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return getattr(self.base.fetch(state, ctx), self.name)

    def fetch_code(self, w: CodeWriter) -> str:
        name = self.name
        if type(name) is str and name.isidentifier() and not keyword.iskeyword(name):
            return f"{w.ref(self.base)}.{name}"
        return f"getattr({w.ref(self.base)}, {w.const('name', name)})"


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

    def fetch_code(self, w: CodeWriter) -> str:
        if self.table not in _MODULE_TABLES:
            return super().fetch_code(w)
        return f"{w.ref(self.base)}.{self.table}[{w.const('name', self.name)}]"


@dataclass(frozen=True)
class MethodFuncSource(Source):
    """The function ``base.name`` is bound to (its ``__func__``; None when that read
    gives no bound method): what a method read on an ``nn.Module`` is guarded on, so
    that replacing it on the instance (``m.helper = MethodType(f, m)``,
    ``m.forward = g``) or on the class recompiles. Its value depends only on the
    instance and class dicts, so the guard fast path's stamp covers it
    (:mod:`ember.frontend.guard_stamp`)."""

    base: Source
    name: str

    def expr(self) -> str:
        return f"{self.base.expr()}.{self.name}.__func__"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return getattr(getattr(self.base.fetch(state, ctx), self.name), "__func__", None)

    def fetch_code(self, w: CodeWriter) -> str:
        return (f"getattr(getattr({w.ref(self.base)}, {w.const('name', self.name)}), "
                "'__func__', None)")


@dataclass(frozen=True)
class ItemSource(Source):
    base: Source
    key: Any

    def expr(self) -> str:
        return f"{self.base.expr()}[{self.key!r}]"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return self.base.fetch(state, ctx)[self.key]

    def fetch_code(self, w: CodeWriter) -> str:
        return f"{w.ref(self.base)}[{_key_code(w, self.key)}]"


@dataclass(frozen=True)
class DictValueSource(Source):
    """The value at position ``index`` (insertion order) of the dict at ``base``: a
    module's hook (``_forward_hooks``), whose key (a handle id, new at each
    registration) differs between modules of the same type that share compiled code."""

    base: Source
    index: int

    def expr(self) -> str:
        return f"list({self.base.expr()}.values())[{self.index}]"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return list(self.base.fetch(state, ctx).values())[self.index]

    def fetch_code(self, w: CodeWriter) -> str:
        return f"list({w.ref(self.base)}.values())[{index_code(self.index)}]"


def _key_code(w: CodeWriter, key: Any) -> str:
    """A subscript key in generated guard code: an int inline, anything else a constant."""
    return index_code(key) if type(key) is int else w.const("key", key)


_BASE_GETITEM: dict[type, Any] = {list: list.__getitem__, dict: dict.__getitem__}


@dataclass(frozen=True)
class BaseItemSource(Source):
    """Item ``key`` of the ``list``/``dict`` subclass instance at ``base``, read with the
    base class's own ``__getitem__`` (``container``): a subclass's Python
    ``__getitem__`` (transformers' ``ModelOutput``) is not what its C methods
    (``items()``, iteration) read."""

    base: Source
    key: Any
    container: type

    def expr(self) -> str:
        return f"{self.container.__name__}.__getitem__({self.base.expr()}, {self.key!r})"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return _BASE_GETITEM[self.container](self.base.fetch(state, ctx), self.key)

    def fetch_code(self, w: CodeWriter) -> str:
        getitem = w.const("getitem", _BASE_GETITEM[self.container])
        return f"{getitem}({w.ref(self.base)}, {_key_code(w, self.key)})"


@dataclass(frozen=True, eq=False)
class TensorKeySource(Source):
    """The item of the dict at ``base`` whose key is the tensor ``key`` (a parameter of
    ``optimizer.state``), compared by identity: ``==`` would compare elements, and a
    tensor's repr would print them."""

    base: Source
    key: Any

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TensorKeySource) and other.key is self.key
                and other.base == self.base)

    def __hash__(self) -> int:
        return hash((self.base, id(self.key)))

    def expr(self) -> str:
        return (f"{self.base.expr()}[<{type(self.key).__name__} of shape "
                f"{tuple(self.key.shape)} at {id(self.key):#x}>]")

    def fetch(self, state: Any, ctx: Any) -> Any:
        return self.base.fetch(state, ctx)[self.key]

    def fetch_code(self, w: CodeWriter) -> str:
        return f"{w.ref(self.base)}[{w.const('key', self.key)}]"


@dataclass(frozen=True)
class RefTargetSource(Source):
    """The object the weak reference at ``base`` refers to (``ref()``; None once dead)."""

    base: Source

    def expr(self) -> str:
        return f"{self.base.expr()}()"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return self.base.fetch(state, ctx)()

    def fetch_code(self, w: CodeWriter) -> str:
        return f"{w.ref(self.base)}()"


@dataclass(frozen=True)
class SliceSource(Source):
    """``base[start:stop:step]`` (a slice of a module container such as
    ``self.layers[:n]``); the bounds are kept apart so the source stays hashable."""

    base: Source
    start: Any
    stop: Any
    step: Any

    def expr(self) -> str:
        bounds = ":".join("" if b is None else repr(b) for b in (self.start, self.stop))
        step = "" if self.step is None else f":{self.step!r}"
        return f"{self.base.expr()}[{bounds}{step}]"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return self.base.fetch(state, ctx)[slice(self.start, self.stop, self.step)]

    def fetch_code(self, w: CodeWriter) -> str:
        bounds = ", ".join(w.const("bound", b) for b in (self.start, self.stop, self.step))
        return f"{w.ref(self.base)}[slice({bounds})]"


@dataclass(frozen=True)
class IterItemSource(Source):
    """The item ``offset`` places after the current position of the iterator at
    ``base`` (a ``ListIterator`` of the frame state at a resume point): the source of
    the items a resumed loop reads, whatever position the loop is at."""

    base: Source
    offset: int

    def expr(self) -> str:
        return f"{self.base.expr()}.item_list[{self.base.expr()}.position + {self.offset}]"

    def fetch(self, state: Any, ctx: Any) -> Any:
        it = self.base.fetch(state, ctx)
        return it.item_list[it.position + self.offset]

    def fetch_code(self, w: CodeWriter) -> str:
        it = w.ref(self.base)
        return f"{it}.item_list[{it}.position + {index_code(self.offset)}]"


@dataclass(frozen=True)
class ClosureSource(Source):
    """Cell ``index`` of the closure of the function at ``base``."""

    base: Source
    index: int

    def expr(self) -> str:
        return f"{self.base.expr()}.__closure__[{self.index}].cell_contents"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return self.base.fetch(state, ctx).__closure__[self.index].cell_contents

    def fetch_code(self, w: CodeWriter) -> str:
        return f"{w.ref(self.base)}.__closure__[{index_code(self.index)}].cell_contents"


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

    def fetch_code(self, w: CodeWriter) -> str:
        if type(self.key) is int:
            return f"{w.ref(self.base)}.__defaults__[{index_code(self.key)}]"
        return f"{w.ref(self.base)}.__kwdefaults__[{w.const('key', self.key)}]"


@dataclass(frozen=True)
class LookupFails(Source):
    """Whether ``base[key]`` (``base.key`` when ``attribute``) raises: guarded ``True``
    after a lookup whose exception the program handled, so that adding the key (or
    attribute) later recompiles instead of taking the handler's branch."""

    base: Source
    key: Any
    attribute: bool

    def expr(self) -> str:
        read = f".{self.key}" if self.attribute else f"[{self.key!r}]"
        return f"raises({self.base.expr()}{read})"

    def fetch(self, state: Any, ctx: Any) -> Any:
        obj = self.base.fetch(state, ctx)
        if self.attribute:
            return not hasattr(obj, self.key)
        return lookup_fails(obj, self.key)

    def fetch_code(self, w: CodeWriter) -> str:
        # NOTE: through the base's local: a fetch() call would walk the base's whole
        # path again from S (a module attribute five levels down, at every call)
        base = w.ref(self.base)
        if self.attribute:
            return f"not hasattr({base}, {w.const('name', self.key)})"
        return f"{w.const('lookup_fails', lookup_fails)}({base}, {w.const('key', self.key)})"


def lookup_fails(obj: Any, key: Any) -> bool:
    """Whether ``obj[key]`` raises a ``LookupError`` (any other error propagates)."""
    try:
        obj[key]
    except LookupError:
        return True
    return False


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


def method_source(capture: Any, owner: Any, func: Any) -> Source | None:
    """A source for the bound method ``func`` of ``owner`` (``owner.<name>``, ``owner``'s
    source known), through which the defaults an inlined call takes are guarded
    (``DefaultSource``: a bound method reads its function's ``__defaults__``); None
    when there is none, or when ``owner.<func.__name__>`` is another function."""
    base = capture.source_of(owner) if capture is not None else None
    name = getattr(func, "__name__", None)
    if base is None or not isinstance(name, str):
        return None
    try:
        if getattr(getattr(owner, name), "__func__", None) is not func:
            return None
    except Exception:  # noqa: BLE001 - a property raising: no source
        return None
    return AttrSource(base, name)
