"""The one guard model of both capture modes: sources, guards, and the table of guard kinds.

A :class:`Guard` tests one fact a capture depended on (``kind``), about a value read
through a :class:`Source` (or about torch's global state, with no source), against what
was seen at capture (``expected``). :data:`GUARD_KINDS` is the one table from a kind to

- how it is checked: the condition written into the generated check function
  (:func:`ember.frontend.guards.compile_matcher`),
- how it is described in ``EMBER_LOGS=guards``,
- how a failure is explained in ``EMBER_LOGS=recompiles`` and the recompile-limit
  warning (with the value seen).

The tracing capture (:mod:`ember.frontend.trace_guards`) and the strict capture
(:mod:`ember.frontend.bytecode.capture`) build guards of these kinds over their own
sources. To add a kind, add a row to :data:`GUARD_KINDS` (next to its three functions)
and a case to ``tests/test_guard_model.py``.

NOTE: a check writes only names the writer makes up, Python syntax and integers
formatted by :func:`index_code`; every captured value (dict keys, names, expected
values) is a constant of the check function's namespace, so no ``repr()`` of a user
object is ever run as code.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from ember.frontend._torch import any_autocast_enabled
from ember.frontend.guard_source import CodeWriter, Source, index_code
from ember.frontend.size_guards import (
    RelationSource,
    SizeSource,
    SymbolicTensor,
    size_only_change,
    size_range_kind,
    size_relation_kind,
    symbolic_tensor_kind,
    tensor_type_code,
)
from ember.runtime.ir import SourceLocation

__all__ = ["GLOBAL_STATE_QUERIES", "GLOBAL_STATE_READERS", "GUARD_KINDS", "MODULE_HOOK_TABLES",
           "CodeWriter", "Guard", "GuardKind", "RelationSource", "SizeSource", "Source",
           "SymbolicTensor", "alias_pattern", "index_code", "size_only_change", "storage_key",
           "tensor_guard"]


@dataclass(frozen=True)
class Guard:
    """One check: ``kind`` (a key of :data:`GUARD_KINDS`), the ``source`` of the value
    checked (None for a fact about global state or several sources), the ``expected``
    fact seen at capture, and ``origin``, the user source line whose capture installed
    it (not compared).

    Raises:
        ValueError: for a kind that is not in :data:`GUARD_KINDS`.
    """

    kind: str
    source: Source | None
    expected: Any
    origin: SourceLocation | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in GUARD_KINDS:
            raise ValueError(f"unknown guard kind {self.kind!r}; known: "
                             f"{', '.join(GUARD_KINDS)}")

    def describe(self) -> str:
        """The guard as one readable line (``EMBER_LOGS=guards``)."""
        return GUARD_KINDS[self.kind].describe(self)

    def where(self) -> str:
        """The source, rendered (empty for a guard without one)."""
        return self.source.expr() if self.source is not None else ""

    def origin_text(self) -> str:
        """Where the guard came from: ``file:line in function: source text``."""
        if self.origin is None:
            return "<no source line: the frame state at the resume point>"
        text = f"{self.origin.file}:{self.origin.line} in {self.origin.function}"
        return f"{text}: {self.origin.text}" if self.origin.text else text


@dataclass(frozen=True)
class GuardKind:
    """How one kind of guard is checked, described and explained.

    ``check(w, guard)`` returns the condition (a Python expression written with ``w``)
    that holds when the guard passes; ``describe(guard)`` is its log line;
    ``explain(guard, actual)`` says why it failed given the value its source holds now
    (None for a guard without a source).
    """

    check: Callable[[CodeWriter, Guard], str]
    describe: Callable[[Guard], str]
    explain: Callable[[Guard, Any], str]


def tensor_guard(source: Source, t: torch.Tensor) -> Guard:
    """The ``tensor`` guard on the metadata of ``t``, read through ``source``, and its
    exact type (code may branch on ``isinstance``/``type`` of a tensor subclass)."""
    return Guard("tensor", source, (t.dtype, tuple(t.shape), tuple(t.stride()), t.device,
                                    bool(t.requires_grad), int(t.storage_offset()),
                                    type(t)))


def alias_pattern(tensors: Any) -> tuple[tuple[int, int], ...]:
    """For each tensor: (position of the first tensor that is the same object, position
    of the first tensor with the same storage)."""
    same_object: dict[int, int] = {}
    same_storage: dict[int, int] = {}
    return tuple(
        (same_object.setdefault(id(t), i), same_storage.setdefault(storage_key(t), i))
        for i, t in enumerate(tensors)
    )


def storage_key(t: torch.Tensor) -> int:
    """What identifies ``t``'s storage: its data address (a tensor with none: itself)."""
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # no storage (sparse, nested): itself
        return id(t)


def _short(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{name} at 0x{id(obj):x}"


def _shown(value: Any) -> str:
    """A value seen by a failed guard, short: a tensor by its type and shape, a long
    repr cut (never a user object's whole repr in a log line)."""
    if isinstance(value, torch.Tensor):
        return f"a {type(value).__name__} of shape {tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _described(guard: Guard, actual: Any) -> str:
    return guard.describe()


GLOBAL_STATE_READERS: dict[str, Callable[[], Any]] = {
    "torch.get_default_dtype()": torch.get_default_dtype,
    # (guarded at the start of a capture, which may enter inference-mode blocks)
    "torch.is_inference_mode_enabled()": torch.is_inference_mode_enabled,
    "torch.is_autocast_enabled('cpu')": functools.partial(torch.is_autocast_enabled, "cpu"),
    "torch.is_autocast_enabled('cuda')": functools.partial(torch.is_autocast_enabled, "cuda"),
    "torch.get_autocast_dtype('cpu')": functools.partial(torch.get_autocast_dtype, "cpu"),
    "torch.get_autocast_dtype('cuda')": functools.partial(torch.get_autocast_dtype, "cuda"),
    "torch.is_autocast_cache_enabled()": torch.is_autocast_cache_enabled,
    # one call for "autocast off for every device type" (the usual state)
    "torch._C._is_any_autocast_enabled()": any_autocast_enabled,
}
"""The global state a ``global`` guard may read, by the text its guard shows."""

_QUERIES: dict[str, Any] = {
    "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled,
    "torch.is_deterministic_algorithms_warn_only_enabled()":
        torch.is_deterministic_algorithms_warn_only_enabled,
    "torch.get_deterministic_debug_mode()": torch.get_deterministic_debug_mode,
    "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision,
    "torch.is_anomaly_enabled()": torch.is_anomaly_enabled,
    "torch.is_anomaly_check_nan_enabled()": torch.is_anomaly_check_nan_enabled,
    "torch.get_num_threads()": torch.get_num_threads,
    "torch.get_num_interop_threads()": torch.get_num_interop_threads,
    "torch.backends.cuda.flash_sdp_enabled()": torch.backends.cuda.flash_sdp_enabled,
    "torch.backends.cuda.mem_efficient_sdp_enabled()":
        torch.backends.cuda.mem_efficient_sdp_enabled,
    "torch.backends.cuda.math_sdp_enabled()": torch.backends.cuda.math_sdp_enabled,
    "torch.backends.cuda.cudnn_sdp_enabled()": torch.backends.cuda.cudnn_sdp_enabled,
}
GLOBAL_STATE_READERS.update(_QUERIES)
GLOBAL_STATE_QUERIES: dict[Any, str] = {fn: text for text, fn in _QUERIES.items()}
"""Torch's queries of global state (flags set by ``torch.use_deterministic_algorithms``,
``set_float32_matmul_precision``, ...), by function: a call in compiled code gives the
value of the capture, so it is guarded (``global``) to be the same at every call."""


# ---- tensor: dtype, shape, strides, device, requires_grad, storage offset -------------

def _tensor_check(w: CodeWriter, g: Guard) -> str:
    v = w.ref(_source(g))
    dtype, sizes, strides, device, rg, offset, cls = g.expected
    d, s = w.const("dtype", dtype), w.const("size", sizes)
    st, dv = w.const("stride", strides), w.const("device", device)
    # NOTE: an exact-type test (a subclass's variant is not a plain tensor's); it is
    # also cheaper than isinstance, which runs Parameter's metaclass check in Python
    return (f"{tensor_type_code(w, v, cls)} "
            f"and {v}.dtype is {d} and {v}.shape == {s} "
            f"and {v}.stride() == {st} and {v}.device == {dv} and "
            f"{v}.requires_grad is {bool(rg)} and "
            f"{v}.storage_offset() == {index_code(offset)}")


def _tensor_describe(g: Guard) -> str:
    where = g.where()
    dtype, sizes, strides, device, rg, offset, cls = g.expected
    shown = "" if cls is torch.Tensor else f"type({where}) is {cls.__qualname__} and "
    return (f"{shown}{where}.dtype == {dtype} and {where}.shape == {sizes} and "
            f"{where}.stride() == {strides} and {where}.device == {device} and "
            f"{where}.requires_grad == {rg} and {where}.storage_offset() == {offset}")


def _tensor_explain(g: Guard, actual: Any) -> str:
    where = g.where()
    if not isinstance(actual, torch.Tensor):
        return f"{where} is a Tensor (got {type(actual).__name__})"
    dtype, sizes, strides, device, rg, offset, cls = g.expected
    if type(actual) is not cls:
        return f"type({where}) is {cls.__qualname__} (got {type(actual).__qualname__})"
    checks = [("dtype", dtype, actual.dtype), ("shape", sizes, tuple(actual.shape)),
              ("stride()", strides, tuple(actual.stride())),
              ("device", device, actual.device),
              ("requires_grad", rg, actual.requires_grad),
              ("storage_offset()", offset, actual.storage_offset())]
    for name, want, got in checks:
        if want != got:
            return f"{where}.{name} == {want} (got {got})"
    return g.describe()


# ---- equals: same type and value (NaN equals NaN) --------------------------------------

_SINGLETONS = (None, True, False)
"""Values an ``equals`` guard checks by identity: of their type, each is the only value
equal to itself (``v is None`` says ``type(v) is NoneType and v == None`` in one test)."""


def _equals_check(w: CodeWriter, g: Guard) -> str:
    v = w.ref(_source(g))
    if any(g.expected is x for x in _SINGLETONS):
        return f"{v} is {g.expected!r}"
    t = w.const("type", type(g.expected))
    if isinstance(g.expected, float) and g.expected != g.expected:
        return f"type({v}) is {t} and {v} != {v}"  # NaN
    if isinstance(g.expected, float) and g.expected == 0.0:
        # -0.0 == 0.0, but copysign, atan2 and 1/x tell them apart
        sign = math.copysign(1.0, g.expected)
        return (f"type({v}) is {t} and {v} == 0.0 and "
                f"{w.const('copysign', math.copysign)}(1.0, {v}) == {sign!r}")
    return f"type({v}) is {t} and {v} == {w.const('c', g.expected)}"


def _equals_describe(g: Guard) -> str:
    return f"{g.where()} == {g.expected!r} ({type(g.expected).__name__})"


def _equals_explain(g: Guard, actual: Any) -> str:
    return f"{g.where()} == {g.expected!r} (got {_shown(actual)})"


# ---- id, type, len, keys ------------------------------------------------------------------

def _id_check(w: CodeWriter, g: Guard) -> str:
    return f"{w.ref(_source(g))} is {w.const('obj', g.expected)}"


def _id_describe(g: Guard) -> str:
    return f"{g.where()} is <{_short(g.expected)}>"


def _id_explain(g: Guard, actual: Any) -> str:
    return f"{g.describe()} (got <{_short(actual)}>)"


def _type_check(w: CodeWriter, g: Guard) -> str:
    return f"type({w.ref(_source(g))}) is {w.const('type', g.expected)}"


def _type_describe(g: Guard) -> str:
    return f"type({g.where()}) is {g.expected.__qualname__}"


def _type_explain(g: Guard, actual: Any) -> str:
    return f"{g.describe()} (got {type(actual).__qualname__})"


def _len_check(w: CodeWriter, g: Guard) -> str:
    return f"len({w.ref(_source(g))}) == {index_code(g.expected)}"


def _len_describe(g: Guard) -> str:
    return f"len({g.where()}) == {g.expected}"


def _len_explain(g: Guard, actual: Any) -> str:
    return f"{g.describe()} (got {len(actual)})"


MODULE_HOOK_TABLES = ("_forward_pre_hooks", "_forward_hooks", "_backward_hooks",
                      "_backward_pre_hooks", "_forward_hooks_always_called")
"""The per-module hook dicts ``nn.Module.__call__`` runs (a ``no_hooks`` guard checks
that all are empty)."""


def _no_hooks_check(w: CodeWriter, g: Guard) -> str:
    v = w.ref(_source(g))
    return "not (" + " or ".join(f"{v}.{table}" for table in MODULE_HOOK_TABLES) + ")"


def _no_hooks_describe(g: Guard) -> str:
    return f"{g.where()} has no module hooks (" + ", ".join(MODULE_HOOK_TABLES) + " empty)"


def _no_hooks_explain(g: Guard, actual: Any) -> str:
    added = [t for t in MODULE_HOOK_TABLES if getattr(actual, t, None)]
    return f"{g.describe()} (got hooks in {', '.join(added) or 'none'})"


def _keys_check(w: CodeWriter, g: Guard) -> str:
    return f"list({w.ref(_source(g))}.keys()) == {w.const('keys', list(g.expected))}"


def _keys_describe(g: Guard) -> str:
    # tensor keys (an optimizer's state, keyed by parameters) by type and shape: a
    # tensor's repr would print its elements into the log line
    keys = ", ".join(f"<{_shown(k)}>" if isinstance(k, torch.Tensor) else repr(k)
                     for k in g.expected)
    return f"list({g.where()}.keys()) == [{keys}]"


# ---- relations between sources: distinct, same, aliasing ---------------------------------

def _distinct_check(w: CodeWriter, g: Guard) -> str:
    ids = ", ".join(f"id({w.ref(s)})" for s in g.expected)
    return f"len({{{ids}}}) == {len(g.expected)}"


def _distinct_describe(g: Guard) -> str:
    return f"{', '.join(s.expr() for s in g.expected)} are distinct tensors"


def _same_check(w: CodeWriter, g: Guard) -> str:
    return f"{w.ref(_source(g))} is {w.ref(g.expected)}"


def _same_describe(g: Guard) -> str:
    return f"{g.where()} is {g.expected.expr()}"


def _aliasing_check(w: CodeWriter, g: Guard) -> str:
    sources, pattern = g.expected
    items = ", ".join(w.ref(s) for s in sources) + ("," if len(sources) == 1 else "")
    return f"{w.const('alias_pattern', alias_pattern)}(({items})) == {w.const('c', pattern)}"


def _aliasing_describe(g: Guard) -> str:
    sources, pattern = g.expected
    shared = [s.expr() for i, (s, p) in enumerate(zip(sources, pattern)) if p != (i, i)]
    if not shared:
        return "no two tensor arguments share memory"
    return f"the same tensors/storages are shared as at capture ({', '.join(shared)})"


# ---- torch's global state: grad mode, default dtype, autocast -----------------------------

def _global_reader(g: Guard) -> Callable[[], Any]:
    reader = GLOBAL_STATE_READERS.get(g.expected[0])
    if reader is None:
        raise ValueError(f"no reader for the global state {g.expected[0]!r}; "
                         f"known: {', '.join(GLOBAL_STATE_READERS)}")
    return reader


def _global_check(w: CodeWriter, g: Guard) -> str:
    return f"{w.const('read', _global_reader(g))}() == {w.const('c', g.expected[1])}"


def _global_describe(g: Guard) -> str:
    return f"{g.expected[0]} == {g.expected[1]!r}"


def _global_explain(g: Guard, actual: Any) -> str:
    return f"{g.describe()} (got {_global_reader(g)()!r})"


def _grad_mode_check(w: CodeWriter, g: Guard) -> str:
    return f"torch.is_grad_enabled() is {bool(g.expected)}"


def _grad_mode_describe(g: Guard) -> str:
    return f"torch.is_grad_enabled() == {g.expected}"


def _grad_mode_explain(g: Guard, actual: Any) -> str:
    return f"{g.describe()} (got {torch.is_grad_enabled()})"


# ---- remaining: how many items a resumed iterator still has -------------------------------

def _remaining_check(w: CodeWriter, g: Guard) -> str:
    v = w.ref(_source(g))
    k, exhausted = g.expected
    return f"len({v}.item_list) - {v}.position {'<=' if exhausted else '>'} {index_code(k)}"


def _remaining_describe(g: Guard) -> str:
    where = g.where()
    k, exhausted = g.expected
    return f"len({where}.item_list) - {where}.position {'<=' if exhausted else '>'} {k}"


def _remaining_explain(g: Guard, actual: Any) -> str:
    return f"{g.describe()} (got {len(actual.item_list) - actual.position} left)"


# ---- structure: the pytree structure of the traced arguments ------------------------------

def _structure_check(w: CodeWriter, g: Guard) -> str:
    return f"{w.ref(_source(g))} == {w.const('spec', g.expected)}"


def _structure_describe(g: Guard) -> str:
    return "the arguments' structure is unchanged"


def _structure_explain(g: Guard, actual: Any) -> str:
    return f"{g.describe()} (got {_shown(actual)})"


def _source(g: Guard) -> Source:
    if g.source is None:
        raise ValueError(f"a {g.kind!r} guard needs a source (got None)")
    return g.source


GUARD_KINDS: dict[str, GuardKind] = {
    # expected: (dtype, sizes, strides, device, requires_grad, storage_offset)
    "tensor": GuardKind(_tensor_check, _tensor_describe, _tensor_explain),
    # expected: the value (compared with its type: 1 and True differ)
    "equals": GuardKind(_equals_check, _equals_describe, _equals_explain),
    # expected: the object itself
    "id": GuardKind(_id_check, _id_describe, _id_explain),
    # expected: the type
    "type": GuardKind(_type_check, _type_describe, _type_explain),
    # expected: the length
    "len": GuardKind(_len_check, _len_describe, _len_explain),
    # expected: None; one check for the five hook dicts of a module (MODULE_HOOK_TABLES)
    "no_hooks": GuardKind(_no_hooks_check, _no_hooks_describe, _no_hooks_explain),
    # expected: the keys in order
    "keys": GuardKind(_keys_check, _keys_describe, _described),
    # no source; expected: the sources of tensor inputs that must be different objects
    "distinct": GuardKind(_distinct_check, _distinct_describe, _described),
    # expected: another source holding the same object
    "same": GuardKind(_same_check, _same_describe, _described),
    # no source; expected: (sources, alias_pattern of their tensors)
    "aliasing": GuardKind(_aliasing_check, _aliasing_describe, _described),
    # no source; expected: (a key of GLOBAL_STATE_READERS, the value it read)
    "global": GuardKind(_global_check, _global_describe, _global_explain),
    # no source; expected: torch.is_grad_enabled()
    "grad_mode": GuardKind(_grad_mode_check, _grad_mode_describe, _grad_mode_explain),
    # expected: (k, exhausted): whether the resumed iterator has no more than k items left
    "remaining": GuardKind(_remaining_check, _remaining_describe, _remaining_explain),
    # expected: the pytree spec of the traced (args, kwargs)
    "structure": GuardKind(_structure_check, _structure_describe, _structure_explain),
    # expected: a SymbolicTensor (sizes/strides/offset may be size expressions)
    "symbolic_tensor": GuardKind(*symbolic_tensor_kind()),
    # source: the SizeSource binding a symbol; expected: (symbol, lower, upper or None)
    "size_range": GuardKind(*size_range_kind()),
    # source: a RelationSource; expected: the relation (IR text over its names)
    "size_relation": GuardKind(*size_relation_kind()),
}
"""Every guard kind: how it is checked, described and explained."""
