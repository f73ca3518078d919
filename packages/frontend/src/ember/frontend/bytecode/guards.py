"""Guards: the facts a captured segment depends on, compiled into one check function.

Each :class:`Guard` tests one value fetched through a :class:`~.sources.Source`. A
:class:`GuardSet` deduplicates them, renders them readably (``EMBER_LOGS=guards``) and
compiles them into a single generated Python function (:func:`compile_matcher`) that
fetches each source once, checks every guard inline and returns the graph inputs. On a
miss :meth:`GuardSet.first_failure` re-checks the guards one by one to name the one that
failed, and :meth:`GuardSet.failure_text` adds the user source line whose capture
installed it (``Guard.origin``, filled in by the set's ``locate`` hook).

What is guarded is what the program's result depends on, never how far a loop has got:
``nn.Module`` values are guarded by type (each attribute, parameter and submodule read
is guarded on its own, and parameters are graph inputs), so the layers of a model share
compiled code; an iterator resumed after a graph break is guarded on how many items it
still has relative to its position (``remaining`` guards, see
:class:`~.iteration.ResumedIterator`), not on the position itself.
"""

from __future__ import annotations

import dataclasses
import functools
import keyword
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from ember.frontend.bytecode.sources import (
    AttrSource,
    CellSource,
    ClosureSource,
    DefaultSource,
    GlobalSource,
    ItemSource,
    IterItemSource,
    LocalSource,
    ModuleMemberSource,
    SliceSource,
    Source,
    StackSource,
)
from ember.runtime.ir import SourceLocation


@dataclass(frozen=True)
class Guard:
    """One check. ``kind`` is one of ``tensor``, ``equals``, ``id``, ``type``, ``len``,
    ``keys``, ``grad_mode``, ``distinct`` (tensor inputs are different objects),
    ``same`` (two sources are one object), ``global`` (an expression over torch's global
    state, e.g. the default dtype), ``remaining`` (``(k, exhausted)``: whether the
    iterator at the source has no more than ``k`` items left); ``expected`` the captured
    fact; ``origin`` the user source line whose capture installed it (not compared)."""

    kind: str
    source: Source | None
    expected: Any
    origin: SourceLocation | None = field(default=None, compare=False)

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
        if self.kind == "remaining":
            k, exhausted = self.expected
            op = "<=" if exhausted else ">"
            return f"len({where}.item_list) - {where}.position {op} {k}"
        return f"{self.kind}({where}, {self.expected!r})"

    def origin_text(self) -> str:
        """Where the guard came from: ``file:line in function: source text``."""
        if self.origin is None:
            return "<no source line: the frame state at the resume point>"
        text = f"{self.origin.file}:{self.origin.line} in {self.origin.function}"
        return f"{text}: {self.origin.text}" if self.origin.text else text


def _short(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{name} at 0x{id(obj):x}"


def tensor_guard(source: Source, t: torch.Tensor) -> Guard:
    return Guard("tensor", source, (t.dtype, tuple(t.shape), tuple(t.stride()), t.device,
                                    bool(t.requires_grad), int(t.storage_offset())))


@dataclass
class GuardSet:
    """The guards of one cache entry, in the order they were installed. ``locate``,
    when set, gives the user source line being captured: each added guard without an
    origin gets it."""

    guards: list[Guard] = field(default_factory=list)
    locate: Callable[[], SourceLocation | None] | None = None
    _seen: set[tuple[Any, ...]] = field(default_factory=set)

    def add(self, guard: Guard) -> None:
        # NOTE: deduplicated by the Source objects themselves (their keys compare as dict
        # keys do), never by rendered text: two keys with one repr are two guards.
        key: tuple[Any, ...] = (guard.kind, guard.source if guard.source is not None
                                else _hashable(guard.expected))
        if guard.kind == "remaining":  # one iterator is asked about several counts
            key = (*key, guard.expected)
        if key in self._seen:
            return
        self._seen.add(key)
        if guard.origin is None and self.locate is not None:
            guard = dataclasses.replace(guard, origin=self.locate())
        self.guards.append(guard)

    def __len__(self) -> int:
        return len(self.guards)

    def describe(self) -> str:
        return "\n".join(f"  {g.describe()}" for g in self.guards)

    def failure_text(self, state: Any, ctx: Any) -> str:
        """The first failing guard, with the value seen (``x.shape == (3, 5) (got
        (4, 5))``) and the user source line that installed it (``; guard from
        file:line in fn: text``), for recompile logs and the recompile-limit warning."""
        guard = self.first_failure(state, ctx)
        if guard is None:
            return "no guard failed"
        return f"{self.explain_failure(guard, state, ctx)}; guard from {guard.origin_text()}"

    @staticmethod
    def explain_failure(guard: Guard, state: Any, ctx: Any) -> str:
        """``guard``, readably, with the value it saw in ``state``."""
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
            if compile_matcher([g])(state, ctx) is None:
                return g
        return None


class _Writer:
    """Writes the body of a generated matcher: each source is fetched once, into a
    local, the first time a guard (or the input list) needs it; guards that share a
    prefix (``self.layers[0].attn`` and ``self.layers[0].mlp``) share its fetch.

    NOTE: the generated text holds only names this class makes up (``v3``, ``c7``),
    Python syntax and integers it formats itself. Every captured value — dict keys,
    attribute and variable names, expected values — is a constant of the function's
    namespace, referred to by its number: a key whose ``repr`` is code is never run, and
    keys are looked up as objects (an Enum, a tuple, a NaN float: the same object is the
    same key, as in a dict).
    """

    def __init__(self) -> None:
        self.names: dict[str, Any] = {"torch": torch, "Tensor": torch.Tensor}
        self.lines: list[str] = []
        self._locals: dict[Source, str] = {}

    def const(self, prefix: str, value: Any) -> str:
        name = f"{prefix}{len(self.names)}"
        self.names[name] = value
        return name

    def ref(self, source: Source) -> str:
        """A local holding ``source``'s value, emitting its fetch on first use."""
        name = self._locals.get(source)
        if name is None:
            value = self._fetch(source)
            name = f"v{len(self._locals)}"
            # NOTE: the comment shows the source; str.__repr__ (not the object's own
            # repr) escapes every line break in it
            shown = str.__repr__(str(source.expr()))
            self.lines.append(f"{name} = {value}  # {shown}")
            self._locals[source] = name
        return name

    def _fetch(self, source: Source) -> str:
        """The expression that reads ``source`` (its base through :meth:`ref`)."""
        if isinstance(source, LocalSource):
            return f"S.locals[{self.const('name', source.name)}]"
        if isinstance(source, StackSource):
            return f"S.stack[{_index(source.index)}]"
        if isinstance(source, CellSource):
            return f"S.cells[{self.const('name', source.name)}].cell_contents"
        if isinstance(source, GlobalSource):
            return f"C.f_globals[{self.const('name', source.name)}]"
        if isinstance(source, AttrSource):
            name = source.name
            if type(name) is str and name.isidentifier() and not keyword.iskeyword(name):
                return f"{self.ref(source.base)}.{name}"
            return f"getattr({self.ref(source.base)}, {self.const('name', name)})"
        if isinstance(source, ModuleMemberSource) and source.table in _MODULE_TABLES:
            return (f"{self.ref(source.base)}.{source.table}"
                    f"[{self.const('name', source.name)}]")
        if isinstance(source, ItemSource):
            return f"{self.ref(source.base)}[{self._key(source.key)}]"
        if isinstance(source, SliceSource):
            bounds = ", ".join(self.const("bound", b) for b in
                               (source.start, source.stop, source.step))
            return f"{self.ref(source.base)}[slice({bounds})]"
        if isinstance(source, IterItemSource):
            it = self.ref(source.base)
            return f"{it}.item_list[{it}.position + {_index(source.offset)}]"
        if isinstance(source, ClosureSource):
            return f"{self.ref(source.base)}.__closure__[{_index(source.index)}].cell_contents"
        if isinstance(source, DefaultSource):
            if type(source.key) is int:
                return f"{self.ref(source.base)}.__defaults__[{_index(source.key)}]"
            return f"{self.ref(source.base)}.__kwdefaults__[{self.const('key', source.key)}]"
        # any other source reads itself (no shared prefix)
        return f"{self.const('source', source)}.fetch(S, C)"

    def _key(self, key: Any) -> str:
        if type(key) is int:
            return _index(key)
        return self.const("key", key)

    def require(self, condition: str) -> None:
        self.lines.append(f"if not ({condition}): return None")

    def guard(self, g: Guard) -> None:
        v = self.ref(g.source) if g.source is not None else ""
        if g.kind == "tensor":
            dtype, sizes, strides, device, rg, offset = g.expected
            d, s = self.const("dtype", dtype), self.const("size", sizes)
            st, dv = self.const("stride", strides), self.const("device", device)
            self.require(f"isinstance({v}, Tensor) and {v}.dtype is {d} and {v}.shape == {s} "
                         f"and {v}.stride() == {st} and {v}.device == {dv} and "
                         f"{v}.requires_grad is {bool(rg)} and "
                         f"{v}.storage_offset() == {_index(offset)}")
        elif g.kind == "equals":
            t = self.const("type", type(g.expected))
            if isinstance(g.expected, float) and g.expected != g.expected:
                self.require(f"type({v}) is {t} and {v} != {v}")  # NaN
            else:
                self.require(f"type({v}) is {t} and {v} == {self.const('c', g.expected)}")
        elif g.kind == "distinct":
            ids = ", ".join(f"id({self.ref(s)})" for s in g.expected)
            self.require(f"len({{{ids}}}) == {len(g.expected)}")
        elif g.kind == "same":
            self.require(f"{v} is {self.ref(g.expected)}")
        elif g.kind == "global":
            reader = GLOBAL_STATE_READERS.get(g.expected[0])
            if reader is None:
                raise ValueError(f"no reader for the global state {g.expected[0]!r}; "
                                 f"known: {', '.join(GLOBAL_STATE_READERS)}")
            self.require(f"{self.const('read', reader)}() == {self.const('c', g.expected[1])}")
        elif g.kind == "id":
            self.require(f"{v} is {self.const('obj', g.expected)}")
        elif g.kind == "type":
            self.require(f"type({v}) is {self.const('type', g.expected)}")
        elif g.kind == "len":
            self.require(f"len({v}) == {_index(g.expected)}")
        elif g.kind == "keys":
            self.require(f"list({v}.keys()) == {self.const('keys', list(g.expected))}")
        elif g.kind == "grad_mode":
            self.require(f"torch.is_grad_enabled() is {bool(g.expected)}")
        elif g.kind == "remaining":
            k, exhausted = g.expected
            left = f"len({v}.item_list) - {v}.position"
            self.require(f"{left} {'<=' if exhausted else '>'} {_index(k)}")
        else:
            raise ValueError(f"unknown guard kind {g.kind!r}")


GLOBAL_STATE_READERS: dict[str, Callable[[], Any]] = {
    "torch.get_default_dtype()": torch.get_default_dtype,
    "torch.is_autocast_enabled('cpu')": functools.partial(torch.is_autocast_enabled, "cpu"),
    "torch.is_autocast_enabled('cuda')": functools.partial(torch.is_autocast_enabled, "cuda"),
}
"""The global state a ``global`` guard may read, by the text its guard shows."""

_MODULE_TABLES = ("_parameters", "_buffers", "_modules")


def _index(value: Any) -> str:
    """An integer written into generated code (an index, a length): only an ``int``."""
    if type(value) is not int:
        value = operator.index(value)
    return str(int(value))


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return ("unhashable", id(value))
    return value


def compile_matcher(
    guards: Sequence[Guard], inputs: Sequence[Source] = ()
) -> Callable[[Any, Any], list[Any] | None]:
    """One generated function ``match(S, C)``: None when a guard fails (or fetching a
    guarded value raises), else the values of ``inputs``, fetched through the same
    locals the guards used. ``EMBER_LOGS=guards`` shows the guards; the generated text
    is ``match.__ember_source__``."""
    w = _Writer()
    for g in guards:
        w.guard(g)
    result = "[" + ", ".join(w.ref(s) for s in inputs) + "]"
    body = "\n        ".join(w.lines)
    src = (
        "def match(S, C):\n"
        "    try:\n"
        f"        {body}\n"
        f"        return {result}\n"
        "    except Exception:\n"
        "        return None\n"
    ) if w.lines else f"def match(S, C):\n    return {result}\n"
    exec(compile(src, "<ember guards>", "exec"), w.names)  # noqa: S102 - generated from guards
    fn: Callable[[Any, Any], list[Any] | None] = w.names["match"]
    fn.__ember_source__ = src  # type: ignore[attr-defined]
    return fn


def _shown(value: Any) -> str:
    """A value seen by a failed guard, short: a tensor by its type and shape, a long
    repr cut (never a user object's whole repr in a log line)."""
    if isinstance(value, torch.Tensor):
        return f"a {type(value).__name__} of shape {tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


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
        return f"{where} == {guard.expected!r} (got {_shown(actual)})"
    if guard.kind == "len":
        return f"len({where}) == {guard.expected} (got {len(actual)})"
    if guard.kind == "type":
        return f"type({where}) is {guard.expected.__qualname__} (got {type(actual).__qualname__})"
    if guard.kind == "remaining":
        left = len(actual.item_list) - actual.position
        return f"{guard.describe()} (got {left} left)"
    return guard.describe()
