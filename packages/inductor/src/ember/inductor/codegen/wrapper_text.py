"""Python source of the values a generated wrapper writes: sizes, strides, views of
buffers and extern-call arguments (:mod:`~ember.inductor.lowering.extern_args` values)."""

from __future__ import annotations

import math

import torch
from ember.inductor.loop_ir import Size, render_size
from ember.inductor.loop_ir.symbolic_index import zero_safe_strides
from ember.inductor.lowering.extern_args import (
    ConstantArg,
    ExternArg,
    ListArg,
    SizeArg,
    TensorArg,
    VariableArg,
)

__all__ = ["py_size", "py_sizes", "py_strides", "py_view", "render_arg"]


def py_size(size: Size) -> str:
    """Python source of a size: an int, or an expression over the wrapper's symbols."""
    return render_size(size, "//")


def py_sizes(sizes: tuple[Size, ...]) -> str:
    """Python source of a size tuple (``repr`` when static, as before)."""
    if all(isinstance(s, int) for s in sizes):
        return repr(tuple(sizes))
    items = [py_size(s) for s in sizes]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def py_strides(sizes: tuple[Size, ...], strides: tuple[Size, ...]) -> str:
    """Python source of the strides of a layout the wrapper makes: torch's for a size
    that may be 0 (``Max(1, u0)``; :func:`.symbolic_index.zero_safe_strides`)."""
    return py_sizes(zero_safe_strides(sizes, strides))


def py_view(buffer: str, sizes: tuple[Size, ...], strides: tuple[Size, ...],
            offset: Size, read: bool = False) -> str:
    """Python source of ``buffer`` viewed with ``sizes``/``strides``, ``offset`` elements
    past its start: ``Tensor.as_strided`` called inline (a view is made on every call of
    the wrapper, hundreds a training step: no helper frame). Without a storage offset,
    ``as_strided`` keeps the buffer's own, so an offset of 0 is not written. ``read``:
    a view that needs no autograd view record (:data:`~.wrapper_header.READ_VIEW_LINES`:
    one an extern only reads, or memory no one else sees), made by ``_read_view``."""
    layout = f"{py_sizes(sizes)}, {py_strides(sizes, strides)}"
    if read:
        return f"_read_view({buffer}, {layout}, {py_size(offset)})"
    if offset == 0:
        return f"{buffer}.as_strided({layout})"
    return f"{buffer}.as_strided({layout}, {buffer}.storage_offset() + {py_size(offset)})"


def render_arg(arg: ExternArg, read: bool = False) -> str:
    """Python source for an extern-call argument or an output (``read``: an argument the
    call only reads, of an op whose result is a fresh tensor: see :func:`py_view`)."""
    if isinstance(arg, TensorArg):
        if arg.view is None:
            return arg.buffer
        sizes, strides, offset = arg.view
        return py_view(arg.buffer, sizes, strides, offset, read)
    if isinstance(arg, VariableArg):
        return arg.name
    if isinstance(arg, SizeArg):
        return py_size(arg.expr)
    if isinstance(arg, ListArg):
        return "[" + ", ".join(render_arg(x, read) for x in arg.items) + "]"
    assert isinstance(arg, ConstantArg)
    value = arg.value
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, (torch.dtype, torch.memory_format, torch.layout)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)
