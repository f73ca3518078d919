"""Guards on symbolic shapes (rows of :data:`ember.frontend.guard_model.GUARD_KINDS`).

A capture with symbolic dimensions guards each tensor input with ``symbolic_tensor``
(dtype, rank, device, static sizes, strides and storage offset as size expressions),
binds each symbol once from the first input dimension that has it as its size
(``size_range``: ``x.size(0) in [2, inf)``, the check function keeps the size in a
local), and checks every other symbolic size and every relation of the graph
(``size_relation``: ``y.size(0) == x.size(0)``, ``x.size(1) == 2*y.size(0)``, with the
source line that introduced it). Size expressions are IR text (Python syntax), written
into the check function with each symbol replaced by the local that binds it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from ember.frontend.guard_source import CodeWriter, Source, index_code

if TYPE_CHECKING:
    from ember.frontend.guard_model import Guard

__all__ = ["RelationSource", "ShapeSource", "SizeSource", "SymbolicTensor", "names_in", "size_only_change",
           "size_range_kind", "size_relation_kind", "symbolic_tensor_kind", "tensor_type_code"]

KindFunctions = tuple[Callable[[CodeWriter, "Guard"], str], Callable[["Guard"], str],
                      Callable[["Guard", Any], str]]


def _source(g: Guard) -> Source:
    if g.source is None:
        raise ValueError(f"a {g.kind!r} guard needs a source (got None)")
    return g.source


@dataclass(frozen=True)
class ShapeSource(Source):
    """The ``shape`` of the tensor at ``base``, read once per check (indexing a
    ``torch.Size`` is several times faster than ``Tensor.size(d)`` calls)."""

    base: Source

    def expr(self) -> str:
        return f"{self.base.expr()}.shape"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return self.base.fetch(state, ctx).shape

    def fetch_code(self, w: CodeWriter) -> str:
        return f"{w.ref(self.base)}.shape"


@dataclass(frozen=True)
class SizeSource(Source):
    """Size ``dim`` of the tensor at ``base``, shown as ``x.size(0)``. A symbol is bound
    by reading it once (the check function keeps it in a local)."""

    base: Source
    dim: int

    def expr(self) -> str:
        return f"{self.base.expr()}.size({self.dim})"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return self.base.fetch(state, ctx).shape[self.dim]

    def fetch_code(self, w: CodeWriter) -> str:
        return f"{w.ref(ShapeSource(self.base))}[{index_code(self.dim)}]"


@dataclass(frozen=True)
class RelationSource(Source):
    """The sizes a relation reads: ``symbols`` maps each name of the relation to the
    :class:`SizeSource` that binds it; fetched, a dict name -> size (for messages)."""

    symbols: tuple[tuple[str, Source], ...]

    def expr(self) -> str:
        return ", ".join(s.expr() for _, s in self.symbols)

    def fetch(self, state: Any, ctx: Any) -> Any:
        return {name: s.fetch(state, ctx) for name, s in self.symbols}


@dataclass(frozen=True)
class SymbolicTensor:
    """What a ``symbolic_tensor`` guard expects of a tensor input with symbolic sizes:
    sizes, strides and storage offset are ints or IR size expressions (``"s0*8"``) over
    the symbols in ``symbols`` (name -> the :class:`SizeSource` that binds it); a stride
    or the offset None is not checked (a free-layout input: :mod:`.free_layouts`)."""

    dtype: torch.dtype
    sizes: tuple[int | str, ...]
    strides: tuple[int | str | None, ...]
    device: torch.device
    requires_grad: bool
    offset: int | str | None
    symbols: tuple[tuple[str, Source], ...]
    cls: type = torch.Tensor  # the exact type (isinstance of a subclass is code's branch)


_TYPE_NAMES: dict[type, str] = {torch.Tensor: "Tensor", torch.nn.Parameter: "Parameter"}
"""Tensor types a check function names directly (:class:`CodeWriter`'s namespace)."""


def tensor_type_code(w: CodeWriter, v: str, cls: type) -> str:
    """The test that local ``v`` is a tensor of exactly type ``cls`` (a variant captured
    for a plain tensor is not one for a subclass, whose code may test ``isinstance``)."""
    return f"type({v}) is {_TYPE_NAMES.get(cls) or w.const('cls', cls)}"


def _renamed(text: str, rename: Callable[[str], str]) -> str:
    """IR size text (Python syntax: names, ints, ``+ - * // %``, ``Max``/``Min``,
    comparisons, ``and``/``or``/``not``) with each name replaced by ``rename(name)``;
    ``Max``/``Min`` become Python's ``max``/``min``."""
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            node.id = node.id.lower() if node.id in ("Max", "Min") else rename(node.id)
    return ast.unparse(tree)


def _value_code(w: CodeWriter, value: int | str, symbols: dict[str, Source]) -> str:
    if isinstance(value, int):
        return index_code(value)
    return f"({_renamed(value, lambda n: w.ref(symbols[n]))})"


def _value_shown(value: int | str | None, symbols: dict[str, Source]) -> str:
    if value is None:
        return "*"  # not checked (a free layout)
    if isinstance(value, int):
        return str(value)
    return _renamed(value, lambda n: symbols[n].expr() if n in symbols else n)


def _strides_code(w: CodeWriter, v: str, strides: tuple[int | str | None, ...],
                  symbols: dict[str, Source]) -> str:
    """The check of ``v``'s strides; those that are None are not checked."""
    if all(s is not None for s in strides):
        items = ", ".join(_value_code(w, s, symbols) for s in strides if s is not None)
        return f"{v}.stride() == ({items}{',' if len(strides) == 1 else ''})"
    return " and ".join([f"{v}.stride({index_code(d)}) == {_value_code(w, s, symbols)}"
                         for d, s in enumerate(strides) if s is not None] or ["True"])


def _tuple_shown(values: tuple[int | str | None, ...], symbols: dict[str, Source]) -> str:
    items = ", ".join(_value_shown(v, symbols) for v in values)
    return f"({items},)" if len(values) == 1 else f"({items})"


def _symbolic_tensor_check(w: CodeWriter, g: Guard) -> str:
    v = w.ref(_source(g))
    shape = w.ref(ShapeSource(_source(g)))
    e: SymbolicTensor = g.expected
    symbols = dict(e.symbols)
    parts = [tensor_type_code(w, v, e.cls),
             f"{v}.dtype is {w.const('dtype', e.dtype)}",
             f"len({shape}) == {index_code(len(e.sizes))}",
             f"{v}.device == {w.const('device', e.device)}",
             f"{v}.requires_grad is {bool(e.requires_grad)}"]
    parts += [f"{shape}[{index_code(i)}] == {index_code(s)}"
              for i, s in enumerate(e.sizes) if isinstance(s, int)]
    parts.append(_strides_code(w, v, e.strides, symbols))
    if e.offset is not None:
        parts.append(f"{v}.storage_offset() == {_value_code(w, e.offset, symbols)}")
    return " and ".join(parts)


def _symbolic_tensor_describe(g: Guard) -> str:
    where, e = g.where(), g.expected
    symbols = dict(e.symbols)
    sizes, strides = (_tuple_shown(values, symbols) for values in (e.sizes, e.strides))
    offset = ("its storage offset free" if e.offset is None
              else f"{where}.storage_offset() == {_value_shown(e.offset, symbols)}")
    return (f"{where}.dtype == {e.dtype} and {where}.shape == {sizes} and "
            f"{where}.stride() == {strides} and {where}.device == {e.device} and "
            f"{where}.requires_grad == {e.requires_grad} and {offset}")


def _symbolic_tensor_explain(g: Guard, actual: Any) -> str:
    where, e = g.where(), g.expected
    if not isinstance(actual, torch.Tensor):
        return f"{where} is a Tensor (got {type(actual).__name__})"
    if type(actual) is not e.cls:
        return f"type({where}) is {e.cls.__qualname__} (got {type(actual).__qualname__})"
    checks = [("dtype", e.dtype, actual.dtype), ("dim()", len(e.sizes), actual.dim()),
              ("device", e.device, actual.device),
              ("requires_grad", e.requires_grad, actual.requires_grad)]
    checks += [(f"size({i})", s, actual.size(i)) for i, s in enumerate(e.sizes)
               if isinstance(s, int) and i < actual.dim()]
    for name, want, got in checks:
        if want != got:
            return f"{where}.{name} == {want} (got {got})"
    return f"{g.describe()} (got strides {tuple(actual.stride())}, storage offset " \
           f"{actual.storage_offset()})"


def _size_range_check(w: CodeWriter, g: Guard) -> str:
    v = w.ref(_source(g))
    _, lower, upper = g.expected
    if upper is None:
        return f"{v} >= {index_code(lower)}"
    return f"{index_code(lower)} <= {v} <= {index_code(upper)}"


def _size_range_describe(g: Guard) -> str:
    symbol, lower, upper = g.expected
    high = "inf)" if upper is None else f"{upper}]"
    return f"{g.where()} in [{lower}, {high} (symbol {symbol})"


def _size_range_explain(g: Guard, actual: Any) -> str:
    return f"{g.describe()} (got {actual})"


def _relation_symbols(g: Guard) -> dict[str, Source]:
    source = _source(g)
    assert isinstance(source, RelationSource)
    return dict(source.symbols)


def _size_relation_check(w: CodeWriter, g: Guard) -> str:
    symbols = _relation_symbols(g)
    return _renamed(g.expected, lambda n: w.ref(symbols[n]))


def _size_relation_describe(g: Guard) -> str:
    text = _value_shown(g.expected, _relation_symbols(g))
    return text if g.origin is None else f"{text}  # from {g.origin_text()}"


def _size_relation_explain(g: Guard, actual: Any) -> str:
    symbols = _relation_symbols(g)
    text = _value_shown(g.expected, symbols)
    seen = ", ".join(f"{symbols[n].expr()} = {actual[n]}" for n in symbols)
    return f"{text} (got {seen})"


def size_only_change(guard: Guard, actual: Any) -> list[tuple[Source, int, int, int]] | None:
    """For a guard that failed on ``actual``: the dimensions whose size changed, as
    ``(tensor source, dim, size at capture, size now)``, when a size change is all that
    failed (same dtype, device, rank, requires_grad); an empty list for a failed range or
    relation of sizes already symbolic; None when anything else failed."""
    if guard.kind in ("size_range", "size_relation"):
        return []
    if guard.kind not in ("tensor", "symbolic_tensor") or not isinstance(actual, torch.Tensor):
        return None
    if guard.kind == "tensor":
        dtype, sizes, _, device, rg, _, cls = guard.expected
    else:
        e = guard.expected
        dtype, sizes, device, rg, cls = e.dtype, e.sizes, e.device, e.requires_grad, e.cls
    if type(actual) is not cls:
        return None
    if (actual.dtype, actual.device, bool(actual.requires_grad), actual.dim()) != (
            dtype, device, bool(rg), len(sizes)):
        return None
    changed = [(_source(guard), d, s, int(actual.size(d))) for d, s in enumerate(sizes)
               if isinstance(s, int) and s != actual.size(d)]
    return changed or None


def symbolic_tensor_kind() -> KindFunctions:
    """The check, describe and explain functions of ``symbolic_tensor``."""
    return _symbolic_tensor_check, _symbolic_tensor_describe, _symbolic_tensor_explain


def size_range_kind() -> KindFunctions:
    """The check, describe and explain functions of ``size_range``."""
    return _size_range_check, _size_range_describe, _size_range_explain


def size_relation_kind() -> KindFunctions:
    """The check, describe and explain functions of ``size_relation``."""
    return _size_relation_check, _size_relation_describe, _size_relation_explain


def names_in(text: str) -> list[str]:
    """The symbol names an IR size expression or relation reads, in order of first use
    (``Max``/``Min`` are functions, not names)."""
    found: dict[str, None] = {}
    for node in ast.walk(ast.parse(text, mode="eval")):
        if isinstance(node, ast.Name) and node.id not in ("Max", "Min"):
            found.setdefault(node.id, None)
    return list(found)
