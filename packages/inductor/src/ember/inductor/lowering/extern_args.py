"""The arguments of an extern call as data: which buffers it reads is structure, not text.

An :class:`~ember.inductor.buffers.ExternCall` keeps each argument as one of

- :class:`TensorArg` — a buffer the wrapper holds, whole or as a strided view of it;
- :class:`VariableArg` — a wrapper variable that is not a tensor buffer (a run-time
  scalar, or a tensor of symbolic sizes when the graph runs eagerly);
- :class:`ListArg` — a list of arguments (``int[]``, ``Tensor[]``);
- :class:`SizeArg` — a symbolic int (a size expression over the graph's symbols, which
  the wrapper binds from its inputs: ``s0*4``);
- :class:`ConstantArg` — a Python constant (number, bool, None, str, dtype, device,
  memory format, layout).

The wrapper (``codegen/wrapper.py``) renders them to Python; :func:`extern_reads` lists
the wrapper variables a call reads, for the scheduler and the wrapper's frees.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import sympy
import torch
from ember.inductor.loop_ir.index import Size, render_size


@dataclass(frozen=True)
class TensorArg:
    """Buffer ``buffer``; with ``view`` = ``(sizes, strides, offset)``, that view of it
    (elements from the buffer's first element)."""

    buffer: str
    view: tuple[tuple[Size, ...], tuple[Size, ...], Size] | None = None

    def __str__(self) -> str:
        if self.view is None:
            return self.buffer
        sizes, strides, offset = self.view
        listed = ["[" + ", ".join(render_size(s, "//") for s in xs) + "]"
                  for xs in (sizes, strides)]
        return (f"{self.buffer}.view({listed[0]}, strides={listed[1]}, "
                f"offset={render_size(offset, '//')})")


@dataclass(frozen=True)
class VariableArg:
    """The wrapper variable ``name``: a value known only at run time."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class SizeArg:
    """A symbolic int: ``expr`` (a sympy expression over size symbols) evaluated by the
    wrapper from the symbols it bound."""

    expr: sympy.Expr

    def __str__(self) -> str:
        return render_size(self.expr, "//")


@dataclass(frozen=True)
class ListArg:
    """A list argument."""

    items: tuple[ExternArg, ...]

    def __str__(self) -> str:
        return "[" + ", ".join(str(x) for x in self.items) + "]"


#: the Python types a :class:`ConstantArg` holds
Constant = (bool | int | float | complex | str | None | torch.dtype | torch.device
            | torch.memory_format | torch.layout)
CONSTANT_TYPES = (bool, int, float, complex, str, type(None), torch.dtype, torch.device,
                  torch.memory_format, torch.layout)


@dataclass(frozen=True)
class ConstantArg:
    """A constant argument."""

    value: Constant

    def __str__(self) -> str:
        return repr(self.value) if not isinstance(self.value, torch.device) else (
            f"device({str(self.value)!r})")


ExternArg = TensorArg | VariableArg | ListArg | ConstantArg | SizeArg


def constant_arg(value: object) -> ConstantArg:
    """``value`` as a :class:`ConstantArg`.

    Raises:
        TypeError: ``value`` is not one of the constant types an extern call takes.
    """
    if not isinstance(value, CONSTANT_TYPES):
        raise TypeError(f"an extern call argument of type {type(value).__name__} "
                        f"({value!r}) is not a constant the wrapper can write")
    return ConstantArg(value)


def _variables(arg: ExternArg) -> Iterator[str]:
    if isinstance(arg, TensorArg):
        yield arg.buffer
    elif isinstance(arg, VariableArg):
        yield arg.name
    elif isinstance(arg, ListArg):
        for item in arg.items:
            yield from _variables(item)


def extern_reads(args: Iterable[ExternArg], kwargs: Mapping[str, ExternArg]) -> list[str]:
    """The wrapper variables ``args`` and ``kwargs`` read, sorted, each once."""
    found: set[str] = set()
    for a in (*args, *kwargs.values()):
        found.update(_variables(a))
    return sorted(found)


__all__ = ["CONSTANT_TYPES", "Constant", "ConstantArg", "ExternArg", "ListArg", "SizeArg",
           "TensorArg", "VariableArg", "constant_arg", "extern_reads"]
