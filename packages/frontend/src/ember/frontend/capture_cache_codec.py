"""The portable (JSON) form of what a strict capture produced: values, sources, guards
and recipes, for the capture cache (:mod:`ember.frontend.capture_cache`).

Every value is written as a tagged JSON list (``["int", 3]``, ``["dtype", "float32"]``,
``["import", "torch.nn.modules.linear", "Linear"]``); objects that are not plain values
are written as the name they are importable under, and only when importing that name
gives back the very same object. A value with no portable form raises
:class:`Unportable`, naming it: the capture is then not cached.

Guards are portable values but for ``id`` guards, which hold an object of this process.
Each is translated: a ``__code__`` identity guard to a code-fingerprint check
(``["code", source, fingerprint]``), an importable object (a builtin or torch function,
a type, an enum member) to "the object importable at module.qualname"
(``["import_id", source, value]``). Decoding turns both back into the ``id`` guard of
the live object, so a cache hit checks exactly what a capture in this process would.

Sources repeat: a 12-layer model's guards walk ``self._modules['encoder']._modules['layer']``
hundreds of times. Inside :func:`writing_sources` each distinct source is written once,
as a row of a table (``[class, fields]``, its own source fields as ``["@", row]``
references to earlier rows), and every use of it is ``["@", row]``;
:func:`reading_sources` decodes the rows once, in order, and resolves the references.

NOTE: never pickle, never ``eval``: decoding only builds the allowed classes below from
checked fields, and resolves names with ``importlib``/``getattr``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import enum
import hashlib
import importlib
import json
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
from ember.frontend._torch import size_functions
from ember.frontend.bytecode.env_rules import EnvSource
from ember.frontend.bytecode.inference_tensors import InferenceFlagSource
from ember.frontend.bytecode.recipes import (
    Const,
    Fetch,
    New,
    Out,
    Recipe,
    Replay,
    SizeExpr,
    StartCell,
)
from ember.frontend.bytecode.sources import (
    AttrSource,
    BaseItemSource,
    CellSource,
    ClosureSource,
    DefaultSource,
    DictValueSource,
    GlobalSource,
    ItemSource,
    IterItemSource,
    LocalSource,
    LookupFails,
    MethodFuncSource,
    ModuleGlobalSource,
    ModuleMemberSource,
    SliceSource,
    StackSource,
)
from ember.frontend.guard_model import Guard, Source
from ember.frontend.size_guards import RelationSource, ShapeSource, SizeSource, SymbolicTensor

__all__ = ["Unportable", "code_fingerprint", "decode_guard", "decode_recipe",
           "decode_replay", "decode_source", "decode_value", "encode_guard", "encode_recipe",
           "encode_replay", "encode_source", "encode_value", "importable_name",
           "reading_sources", "resolve_name", "writing_sources"]

JSON = Any


class Unportable(Exception):
    """A value, source, guard or recipe with no portable form (the message names it)."""


_SOURCES: dict[str, type[Source]] = {cls.__name__: cls for cls in (
    AttrSource, BaseItemSource, CellSource, ClosureSource, DefaultSource, DictValueSource,
    GlobalSource, ItemSource, IterItemSource, LocalSource, LookupFails, MethodFuncSource,
    ModuleGlobalSource, ModuleMemberSource, SliceSource, StackSource, ShapeSource,
    SizeSource, RelationSource, EnvSource, InferenceFlagSource)}
"""The sources a cached capture may read through, by class name (``EnvSource``: an
environment variable, read again in the loading process; ``InferenceFlagSource``: a
tensor's ``is_inference()``)."""

_RECORDS: dict[str, type[Any]] = {"SymbolicTensor": SymbolicTensor}
"""Other dataclasses a guard may expect."""

_NEW_KINDS = frozenset({"list", "dict", "object", "tuple", "set", "slice", "deque", "cell"})
"""The kinds of :class:`~ember.frontend.bytecode.recipes.New` recipes a cached capture
may rebuild (not functions, methods, iterators or exceptions, which hold objects of
the capturing process)."""


# ---- fingerprints -----------------------------------------------------------------------

def code_fingerprint(code: types.CodeType) -> str:
    """The SHA-256 of what ``code`` does: its qualified name, bytecode, names, constants
    (nested code objects recursively), flags, argument counts and exception table; not
    its line numbers or file name."""
    h = hashlib.sha256()
    for part in _code_parts(code):
        h.update(part.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


def _code_parts(code: types.CodeType) -> Iterator[str]:
    yield getattr(code, "co_qualname", code.co_name)
    yield code.co_code.hex()
    yield getattr(code, "co_exceptiontable", b"").hex()
    yield repr((code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
                code.co_flags, code.co_names, code.co_varnames, code.co_freevars,
                code.co_cellvars))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_parts(const)
        else:
            yield _const_text(const)


def _const_text(const: Any) -> str:
    if isinstance(const, frozenset):  # NOTE: set order varies with string hashing
        return "frozenset(" + ",".join(sorted(_const_text(c) for c in const)) + ")"
    if isinstance(const, tuple):
        return "(" + ",".join(_const_text(c) for c in const) + ")"
    return f"{type(const).__name__}:{const!r}"


# ---- importable objects ------------------------------------------------------------------

def resolve_name(module: str, qualname: str) -> Any:
    """The object importable at ``module`` + ``qualname`` (attributes walked with
    ``getattr``).

    Raises:
        Unportable: the module cannot be imported or an attribute is missing.
    """
    try:
        obj: Any = sys.modules.get(module) or importlib.import_module(module)
    except ImportError as e:
        raise Unportable(f"module {module!r} cannot be imported ({e})") from None
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise Unportable(f"{module}.{qualname} does not exist") from None
    return obj


def importable_name(obj: Any) -> tuple[str, str] | None:
    """``(module, qualname)`` under which ``obj`` itself is importable, or None."""
    module: Any
    qualname: Any
    if isinstance(obj, enum.Enum):
        cls = type(obj)
        module, qualname = cls.__module__, f"{cls.__qualname__}.{obj.name}"
    elif isinstance(obj, types.BuiltinFunctionType) and isinstance(obj.__self__,
                                                                   types.ModuleType):
        module, qualname = obj.__self__.__name__, obj.__name__
    elif isinstance(obj, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        cls = obj.__objclass__
        module, qualname = cls.__module__, f"{cls.__qualname__}.{obj.__name__}"
    else:
        module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    try:
        found = resolve_name(module, qualname)
    except Unportable:
        return None
    return (module, qualname) if found is obj else None


# ---- values --------------------------------------------------------------------------------

def encode_value(value: Any) -> JSON:
    """``value`` as tagged JSON.

    Raises:
        Unportable: for a value without a portable form.
    """
    if value is None:
        return ["none"]
    if isinstance(value, bool):
        return ["bool", value]
    if type(value) is int:
        return ["int", value]
    if type(value) is float:
        return ["float", value.hex()]
    if type(value) is str:
        return ["str", value]
    if type(value) is tuple:
        return ["tuple", [encode_value(v) for v in value]]
    if type(value) is list:
        return ["list", [encode_value(v) for v in value]]
    if isinstance(value, torch.dtype):
        return ["dtype", str(value).removeprefix("torch.")]
    if isinstance(value, torch.device):
        return ["device", str(value)]
    if isinstance(value, types.ModuleType):
        return ["module", value.__name__]
    if isinstance(value, Source):
        return ["source", encode_source(value)]
    if isinstance(value, Recipe):
        return ["recipe", encode_recipe(value)]
    if dataclasses.is_dataclass(value) and type(value).__name__ in _RECORDS:
        return ["record", type(value).__name__,
                [encode_value(getattr(value, f.name)) for f in dataclasses.fields(value)]]
    name = importable_name(value)
    if name is not None:
        return ["import", *name]
    raise Unportable(f"a value of type {type(value).__qualname__}")


def decode_value(data: JSON) -> Any:
    """The value :func:`encode_value` wrote.

    Raises:
        Unportable: an importable name that no longer resolves.
        ValueError: for data no encoder wrote.
    """
    tag = data[0]
    decoder = _VALUE_DECODERS.get(tag)
    if decoder is None:
        raise ValueError(f"unknown value tag {tag!r}")
    return decoder(data)


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{name!r} is not a torch dtype")  # noqa: TRY004 - a bad entry
    return dtype


def _record(data: JSON) -> Any:
    cls = _RECORDS[data[1]]
    return cls(*(decode_value(v) for v in data[2]))


_VALUE_DECODERS: dict[str, Callable[[JSON], Any]] = {
    "none": lambda d: None,
    "bool": lambda d: bool(d[1]),
    "int": lambda d: int(d[1]),
    "float": lambda d: float.fromhex(d[1]),
    "str": lambda d: str(d[1]),
    "tuple": lambda d: tuple(decode_value(v) for v in d[1]),
    "list": lambda d: [decode_value(v) for v in d[1]],
    "dtype": lambda d: _dtype(d[1]),
    "device": lambda d: torch.device(d[1]),
    "module": lambda d: importlib.import_module(d[1]),
    "source": lambda d: decode_source(d[1]),
    "recipe": lambda d: decode_recipe(d[1]),
    "record": _record,
    "import": lambda d: resolve_name(d[1], d[2]),
}


# ---- sources -------------------------------------------------------------------------------

class SourceTable:
    """The rows of the distinct sources written inside :func:`writing_sources`."""

    def __init__(self) -> None:
        self.rows: list[JSON] = []
        # NOTE: keyed on the row's exact JSON, not on the source: dataclass equality
        # would merge ItemSource(x, 1) with ItemSource(x, True)
        self._index: dict[str, int] = {}

    def ref(self, row: JSON) -> JSON:
        text = json.dumps(row)
        i = self._index.get(text)
        if i is None:
            i = self._index[text] = len(self.rows)
            self.rows.append(row)
        return ["@", i]


_WRITING: contextvars.ContextVar[SourceTable | None] = contextvars.ContextVar(
    "ember_source_table", default=None)
_READING: contextvars.ContextVar[list[Source] | None] = contextvars.ContextVar(
    "ember_source_rows", default=None)


@contextlib.contextmanager
def writing_sources() -> Iterator[SourceTable]:
    """Sources encoded inside are rows of the table it yields (module docstring)."""
    table = SourceTable()
    token = _WRITING.set(table)
    try:
        yield table
    finally:
        _WRITING.reset(token)


@contextlib.contextmanager
def reading_sources(rows: JSON) -> Iterator[None]:
    """Decodes ``rows`` (a :class:`SourceTable`'s) for the ``["@", row]`` references
    decoded inside.

    Raises:
        ValueError: a row that refers to itself or a later row, or is no source.
    """
    if not isinstance(rows, list):
        raise ValueError("the source table is not a list")  # noqa: TRY004 - a bad entry
    decoded: list[Source] = []
    token = _READING.set(decoded)
    try:
        for row in rows:
            # a row's references resolve against the rows before it only
            decoded.append(_decode_source_row(row))
        yield
    finally:
        _READING.reset(token)


def encode_source(source: Source) -> JSON:
    """``source`` as JSON: its class name and fields (a table reference inside
    :func:`writing_sources`).

    Raises:
        Unportable: a source class a cached capture may not read through.
    """
    name = type(source).__name__
    if _SOURCES.get(name) is not type(source):
        raise Unportable(f"the source {source.expr()} ({name})")
    row = [name, [encode_value(getattr(source, f.name))
                  for f in dataclasses.fields(source)]]  # type: ignore[arg-type]
    table = _WRITING.get()
    return row if table is None else table.ref(row)


def decode_source(data: JSON) -> Source:
    """The source :func:`encode_source` wrote.

    Raises:
        ValueError: an unknown source class, or a table reference with no such row.
    """
    if data[0] == "@":
        rows = _READING.get()
        i = data[1]
        if rows is None or type(i) is not int or not 0 <= i < len(rows):
            raise ValueError(f"the source reference {i!r} names no earlier row")
        return rows[i]
    return _decode_source_row(data)


def _decode_source_row(data: JSON) -> Source:
    cls = _SOURCES.get(data[0])
    if cls is None:
        raise ValueError(f"unknown source class {data[0]!r}")
    return cls(*(decode_value(v) for v in data[1]))


# ---- guards --------------------------------------------------------------------------------

def encode_guard(guard: Guard) -> JSON:
    """``guard`` as JSON; an ``id`` guard translated (module docstring).

    Raises:
        Unportable: an ``id`` guard on an object that is neither code nor importable,
            or a guard whose source or expected value has no portable form.
    """
    source = None if guard.source is None else encode_source(guard.source)
    if guard.kind == "id":
        if isinstance(guard.expected, types.CodeType):
            return ["code", source, code_fingerprint(guard.expected)]
        name = importable_name(guard.expected)
        if name is None:
            raise Unportable(f"the identity guard {guard.describe()}")
        return ["import_id", source, ["import", *name]]
    try:
        return ["guard", guard.kind, source, encode_value(guard.expected)]
    except Unportable as e:
        raise Unportable(f"the guard {guard.describe()}: {e}") from None


def decode_guard(data: JSON, live: Callable[[Source], Any]) -> Guard:
    """The guard :func:`encode_guard` wrote; ``live(source)`` reads a source's value in
    the call being checked (for a code-fingerprint check).

    Raises:
        Unportable: the guard cannot hold (code that changed, a name that no longer
            resolves), naming why.
    """
    if data[0] == "guard":
        source = None if data[2] is None else decode_source(data[2])
        return Guard(str(data[1]), source, decode_value(data[3]))
    source = None if data[1] is None else decode_source(data[1])
    if data[0] == "code":
        assert source is not None
        code = live(source)
        if not isinstance(code, types.CodeType) or code_fingerprint(code) != data[2]:
            raise Unportable(f"the code at {source.expr()} changed")
        return Guard("id", source, code)
    if data[0] == "import_id":
        return Guard("id", source, decode_value(data[2]))
    raise ValueError(f"unknown guard form {data[0]!r}")


# ---- recipes -------------------------------------------------------------------------------

def encode_recipe(recipe: Recipe) -> JSON:
    """``recipe`` (how a result is rebuilt from the graph's outputs) as JSON.

    Raises:
        Unportable: a recipe that rebuilds an object of the capturing process.
    """
    if isinstance(recipe, Out):
        return ["out", recipe.index]
    if isinstance(recipe, Const):
        return ["const", encode_value(recipe.value)]
    if isinstance(recipe, Fetch):
        return ["fetch", encode_source(recipe.source)]
    if isinstance(recipe, StartCell):
        return ["start_cell", recipe.name]
    if isinstance(recipe, SizeExpr) and recipe.kind == "int":
        return ["size_expr", encode_size_expr(recipe.expr),
                [[name, encode_source(source), dim] for name, source, dim in recipe.sizes]]
    if isinstance(recipe, New) and recipe.kind in _NEW_KINDS:
        return ["new", recipe.kind, recipe.key, encode_value(recipe.parts),
                encode_value(recipe.extra)]
    what = recipe.kind if isinstance(recipe, New) else type(recipe).__name__
    raise Unportable(f"a result rebuilt as {what}")


def decode_recipe(data: JSON) -> Recipe:
    """The recipe :func:`encode_recipe` wrote.

    Raises:
        ValueError: an unknown recipe.
    """
    tag = data[0]
    if tag == "out":
        return Out(int(data[1]))
    if tag == "const":
        return Const(decode_value(data[1]))
    if tag == "fetch":
        return Fetch(decode_source(data[1]))
    if tag == "start_cell":
        return StartCell(str(data[1]))
    if tag == "size_expr":
        sizes = [(str(name), decode_source(source), int(dim)) for name, source, dim in data[2]]
        return SizeExpr(decode_size_expr(data[1]), sizes)
    if tag == "new" and data[1] in _NEW_KINDS:
        parts = decode_value(data[3])
        return New(data[1], int(data[2]), parts, decode_value(data[4]))
    raise ValueError(f"unknown recipe {tag!r}")


# ---- replays -------------------------------------------------------------------------------

def encode_replay(replay: Replay, named: dict[int, tuple[str, str]]) -> JSON:
    """``replay`` (a side effect written back after the graph) as JSON. ``named`` maps
    ``id`` of objects the capture read as module globals without a source to ``(module,
    name)``: a write to such an object (or to a module's globals) targets the object
    that name holds in the loading process, as a capture there would.

    Raises:
        Unportable: a write to an object with no portable form (a cell, a local object).
    """
    target: JSON
    obj = replay.target.value if isinstance(replay.target, Const) else None
    if isinstance(replay.target, Const) and id(obj) in named:
        target = ["named", *named[id(obj)]]
    elif isinstance(replay.target, Const) and isinstance(obj, dict) and _module_dict(obj):
        target = ["module_dict", obj["__name__"]]
    else:
        target = ["recipe", encode_recipe(replay.target)]
    return [replay.kind, target, encode_value(replay.value), replay.name, replay.raw]


def _module_dict(obj: dict[str, Any]) -> bool:
    module = sys.modules.get(str(obj.get("__name__")))
    return module is not None and module.__dict__ is obj


def decode_replay(data: JSON) -> Replay:
    """The replay :func:`encode_replay` wrote, its target resolved in this process.

    Raises:
        Unportable: a named target that no longer resolves.
        ValueError: data no encoder wrote.
    """
    kind, target, value, name, raw = data
    recipe: Recipe
    if target[0] == "named":
        recipe = Const(resolve_name(target[1], target[2]))
    elif target[0] == "module_dict":
        recipe = Const(importlib.import_module(target[1]).__dict__)
    elif target[0] == "recipe":
        recipe = decode_recipe(target[1])
    else:
        raise ValueError(f"unknown replay target {target[0]!r}")
    return Replay(str(kind), recipe, decode_value(value), str(name), bool(raw))


# ---- size expressions ------------------------------------------------------------------
# NOTE: written as a tree of the few node kinds a size expression has, never as text for
# sympy to parse (sympify evaluates Python): an entry decodes to exactly those nodes

def encode_size_expr(expr: Any) -> JSON:
    """A sympy size expression (``SizeExpr.expr``) as JSON.

    Raises:
        Unportable: a node other than an integer, a symbol, ``+``, ``*``, an integer
            power or torch's ``FloorDiv``/``PythonMod``/``Mod``.
    """
    if expr.is_Integer:
        return ["int", int(expr)]
    if expr.is_Symbol:
        return ["sym", str(expr)]
    if expr.is_Add or expr.is_Mul:
        return ["add" if expr.is_Add else "mul", [encode_size_expr(a) for a in expr.args]]
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) >= 0:
        return ["pow", encode_size_expr(expr.base), int(expr.exp)]
    name = type(expr).__name__
    if name in size_functions():
        return ["fn", name, [encode_size_expr(a) for a in expr.args]]
    raise Unportable(f"the size expression {expr} ({name})")


def decode_size_expr(data: JSON) -> Any:
    """The expression :func:`encode_size_expr` wrote.

    Raises:
        ValueError: an unknown node.
    """
    import sympy

    tag = data[0]
    if tag == "int":
        return sympy.Integer(int(data[1]))
    if tag == "sym":
        return sympy.Symbol(str(data[1]), integer=True)
    if tag in ("add", "mul"):
        args = [decode_size_expr(a) for a in data[1]]
        return sympy.Add(*args) if tag == "add" else sympy.Mul(*args)
    if tag == "pow":
        return sympy.Pow(decode_size_expr(data[1]), sympy.Integer(int(data[2])))
    functions = size_functions()
    if tag == "fn" and data[1] in functions:
        return functions[data[1]](*(decode_size_expr(a) for a in data[2]))
    raise ValueError(f"unknown size expression node {data!r}")
