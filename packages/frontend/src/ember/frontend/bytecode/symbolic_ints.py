"""Python ints that automatic dynamic made symbolic (``DynamicPolicy.symbolic_int``):
an int argument or attribute whose value changed between two captures of the same code
(a step counter, a position passed as an int) is, in later captures, the size of a
carrier input, a SymInt with the range and guards of any input dimension, instead of a
constant guarded by value; one capture then serves every value from 2 up (0 and 1
specialise, as sizes do). Code that needs its value (``range(n)``, ``math.sqrt(n)``)
specialises it, as it does an input's size; code that cannot take a SymInt at all
(``table[n]``: unhashable) turns symbolic ints off for the function
(``DynamicPolicy.refuse_symbolic_ints``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from ember.frontend.guard_model import CodeWriter, Source

__all__ = ["IntCarrierSource", "int_carrier", "symbolic_int"]


def int_carrier(value: Any) -> Any:
    """The tensor of shape ``(value,)`` that carries the int ``value`` as a size
    (:class:`IntCarrierSource`): one byte, expanded (stride 0; a zero-size dim beside
    it would make torch specialise the size).

    Raises:
        TypeError: ``value`` is not a non-negative int (the guard reading it fails).
    """
    if type(value) is not int or value < 0:
        raise TypeError(f"an int carrier needs a non-negative int, got {value!r}")
    return torch.empty((1,), dtype=torch.bool).expand(value)


@dataclass(frozen=True)
class IntCarrierSource(Source):
    """A Python int at ``base`` that automatic dynamic made symbolic, as a graph input:
    the size of a one-byte tensor expanded to shape ``(n,)``, made at each call
    (:func:`int_carrier`), so that the int is a size symbol like any input dimension,
    with its range guard and its symbolic uses, instead of a constant guarded by
    value (a step counter, a position passed as an int)."""

    base: Source

    def expr(self) -> str:
        return f"int_carrier({self.base.expr()})"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return int_carrier(self.base.fetch(state, ctx))

    def fetch_code(self, w: CodeWriter) -> str:
        return f"{w.const('fn', int_carrier)}({w.ref(self.base)})"


def symbolic_int(cap: Any, value: int, source: Source) -> Any:
    """The int ``value`` read from ``source`` in capture ``cap``: a SymInt over the size
    of its carrier input in a symbolic capture (a plain int when it specialises), else
    the value guarded by equality (a negative int, a static capture)."""
    if value < 0 or cap.recorder.shape_env is None:
        cap.guard("equals", source, value)
        return value
    cap.guard("type", source, int)
    if cap.recording:  # NOTE: a real tensor, made outside the recorder
        cap.recorder.__exit__(None, None, None)
        try:
            real = int_carrier(value)
        finally:
            cap.recorder.__enter__()
    else:
        real = int_carrier(value)
    return cap.wrap(real, IntCarrierSource(source)).size(0)
