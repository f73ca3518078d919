"""Symbolic inputs made by another ``ShapeEnv`` (Dynamo's, ``make_fx``'s,
``torch.export``'s), re-expressed over IR symbols for the importers.

:func:`~ember.runtime.fx_import.import_fx` and
:func:`~ember.runtime.export_import.import_exported` are handed fake tensors whose sizes
are symbols of someone else's ``ShapeEnv`` (``s77``, ``s27``) and ``SymInt`` inputs that
stand for such sizes. :class:`ForeignShapes` renames those symbols and reads their ranges:

=============================================  =========================================
the foreign input                              the IR
=============================================  =========================================
a symbol that is a plain size of a tensor      ``s0, s1, ...``, in the order the symbols
input                                          first appear (inputs in order, dims in
                                               order); range from the foreign
                                               ``ShapeEnv``, hint from the example value
sizes, strides, offset of a tensor input       :class:`TensorMeta` text over those names
                                               (``s0``, ``4*s0``, ``s0*s1``)
a ``SymInt`` input                             the IR text of its size (``s0``); the
                                               program has no placeholder for it
a symbol that is no plain size of a tensor     refused (:class:`SymbolicImportError`):
input (a Python ``int`` argument Dynamo made   no placeholder binds it
symbolic), or an expression outside the IR's
grammar
=============================================  =========================================

The recorder then makes fakes in its own ``ShapeEnv`` from that metadata
(:meth:`~ember.runtime.tracing.GraphRecorder.add_meta_input`), so the recorded program
keeps these names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from ember.runtime._torch import symbol_hint, symbol_range
from ember.runtime.ir import IRFormatError, SymbolRange, SymInt, TensorMeta, symbolic

__all__ = ["ForeignShapes", "SizeSite", "SymbolicImportError", "is_symbolic"]

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


class SymbolicImportError(NotImplementedError):
    """A symbolic input an importer cannot express over IR symbols; the message names
    the input and why (the Dynamo backend then compiles per shape)."""


def is_symbolic(value: Any) -> bool:
    """A symbolic number, or a tensor with a symbolic size, stride or offset."""
    if isinstance(value, _SYMBOLIC):
        return True
    return isinstance(value, torch.Tensor) and any(
        isinstance(s, torch.SymInt)
        for s in (*value.shape, *value.stride(), value.storage_offset()))


@dataclass(frozen=True)
class SizeSite:
    """Dim ``dim`` of input ``position`` (among all the inputs handed over)."""

    position: int
    dim: int


class ForeignShapes:
    """The IR names, ranges and hints of the foreign symbols of ``inputs``.

    Args:
        inputs: one ``(name, described, example)`` per input, in order: its name (for
            messages), its symbolic description (a fake tensor with symbolic sizes, a
            ``SymInt``, or a static value) and the value it is called with at capture
            (a real tensor whose sizes are the hints, or the description itself).

    Attributes:
        names: foreign symbol -> IR name.
        sites: IR name -> the tensor input dim it is a plain size of (first one).
        ranges: IR name -> its range and hint.
    """

    def __init__(self, inputs: Sequence[tuple[str, Any, Any]]) -> None:
        self._input_names = [name for name, _, _ in inputs]
        self.names: dict[sympy.Symbol, str] = {}
        self.sites: dict[str, SizeSite] = {}
        self.ranges: dict[str, SymbolRange] = {}
        for position, (_, described, example) in enumerate(inputs):
            if not isinstance(described, torch.Tensor):
                continue
            for dim, size in enumerate(described.shape):
                if not isinstance(size, torch.SymInt):
                    continue
                expr = size.node.expr
                if not isinstance(expr, sympy.Symbol) or expr in self.names:
                    continue
                name = f"s{len(self.names)}"
                self.names[expr] = name
                self.sites[name] = SizeSite(position, dim)
                self.ranges[name] = _range(size, example, dim)

    def text(self, value: int | torch.SymInt, where: str) -> SymInt:
        """``value`` (an int or a foreign ``SymInt``) as IR text over the IR names.

        Raises:
            SymbolicImportError: ``value`` uses a symbol that is no plain size of a
                tensor input, or has no form in the IR's grammar (names ``where``).
        """
        if isinstance(value, int):
            return value
        expr = value.node.expr
        unknown = sorted(str(s) for s in expr.free_symbols if s not in self.names)
        if unknown:
            raise SymbolicImportError(
                f"{where} is the symbolic value {expr}, and {', '.join(unknown)} is no "
                "size of a tensor input (a Python number made symbolic): no input binds it")
        renamed = expr.xreplace({s: symbolic.symbol(n) for s, n in self.names.items()})
        try:
            return symbolic.format(renamed)
        except IRFormatError as e:
            raise SymbolicImportError(f"{where} is the symbolic value {expr}: {e}") from None

    def meta(self, name: str, fake: torch.Tensor) -> TensorMeta:
        """The :class:`TensorMeta` of tensor input ``name`` described by ``fake``.

        Raises:
            SymbolicImportError: as :meth:`text`.
        """
        where = f"graph input {name!r}"
        return TensorMeta(
            dtype=fake.dtype,
            sizes=tuple(self.text(s, f"{where} size {d}") for d, s in enumerate(fake.shape)),
            strides=tuple(self.text(s, f"{where} stride {d}")
                          for d, s in enumerate(fake.stride())),
            device=fake.device,
            storage_offset=self.text(fake.storage_offset(), f"{where} storage offset"),
            requires_grad=bool(fake.requires_grad),
        )

    def symbols_of(self, meta: TensorMeta) -> dict[str, SymbolRange]:
        """The range of each IR symbol ``meta`` uses."""
        used: set[str] = set()
        for value in (*meta.sizes, *meta.strides, meta.storage_offset):
            used |= symbolic.free_symbols(value)
        return {s: self.ranges[s] for s in sorted(used)}

    def size_value(self, text: SymInt, fakes: Sequence[Any], where: str) -> Any:
        """The value of a ``SymInt`` input (IR ``text``) over ``fakes``, the recorder's
        inputs: an int, or the recorder's ``SymInt`` of a plain size.

        Raises:
            SymbolicImportError: ``text`` is an expression, not a plain size.
        """
        if isinstance(text, int):
            return text
        site = self.sites.get(text)
        if site is None:
            raise SymbolicImportError(f"{where} is the size expression {text}; only plain "
                                      "sizes of tensor inputs are supported as inputs")
        return fakes[site.position].shape[site.dim]


def _range(size: torch.SymInt, example: Any, dim: int) -> SymbolRange:
    """The foreign symbol's range (its ``ShapeEnv``'s) and hint (the example's size,
    else the foreign hint)."""
    shape_env, expr = size.node.shape_env, size.node.expr
    lower, upper = symbol_range(shape_env, expr)
    if isinstance(example, torch.Tensor) and not is_symbolic(example):
        hint: int | None = int(example.shape[dim])
    else:
        hint = symbol_hint(shape_env, expr)
    return SymbolRange(2 if lower is None else lower, upper, hint)
