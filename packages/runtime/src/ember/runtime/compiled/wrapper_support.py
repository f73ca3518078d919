"""The helpers a generated wrapper may call, and the namespace it runs in.

A wrapper is plain Python executed with :func:`exec` in a fresh namespace holding only
``torch``, ``aten`` (``torch.ops.aten``), ``ops`` (``torch.ops``), ``empty_strided``,
the helpers below (a wrapper imports :func:`allocator` itself, so that one written for
this runtime still runs on an older one), ``_aligned`` (a TMA kernel's unaligned operand copied for the call:
:mod:`.triton_alignment`), ``Max``/``Min`` (for guards over size symbols), ``constants``
and the artifact's kernels by name.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from ember.runtime.compiled._torch import (
    fast_empty_strided,
    fast_reinterpret,
    raw_current_device,
)
from ember.runtime.compiled.triton_alignment import AlignedCopies
from ember.runtime.custom_ops import check_fake_kernel
from ember.runtime.ir.symbolic import ShapeError, SymbolBinder
from ember.runtime.logs import log

Allocate = Callable[[tuple[int, ...], tuple[int, ...], torch.dtype], torch.Tensor]
"""``alloc(sizes, strides, dtype)``: a new, uninitialised tensor (a wrapper's ``_empty``)."""


@functools.cache
def allocator(device: str) -> Allocate:
    """A wrapper's ``_empty`` for buffers on ``device`` (its text: ``"cpu"``,
    ``"cuda:0"``): torch's C++ allocation (:func:`._torch.fast_empty_strided`) where it
    makes what ``torch.empty_strided`` makes (checked once per process and device: an
    allocation of each rank's layout), else ``torch.empty_strided`` with the device
    parsed once. A wrapper allocates hundreds of buffers a training step; the portable
    call parses its keyword arguments and the device's text each time (module doc of
    ``ember.inductor.codegen.wrapper_header``). On a CUDA device of a given index, the
    C++ call (which allocates on the current device) is taken while that device is the
    current one."""
    where = torch.device(device)

    def portable(sizes: tuple[int, ...], strides: tuple[int, ...],
                 dtype: torch.dtype) -> torch.Tensor:
        return torch.empty_strided(sizes, strides, dtype=dtype, device=where)

    fast = fast_empty_strided(where.type)
    if fast is not None and where.type == "cuda" and where.index is not None:
        fast = _while_current(fast, where.index, portable)
    if fast is None:
        return portable
    if not _allocates_like(fast, where):
        log("cache", f"buffers on {device}: torch.empty_strided (torch's C++ allocation "
                     "failed its check)")
        return portable
    return fast


def _while_current(fast: Allocate, index: int, other: Allocate) -> Allocate | None:
    """``fast`` (which allocates on the current CUDA device) while device ``index`` is
    the current one, else ``other``; None where the current device cannot be read."""
    current = raw_current_device()
    if current is None:
        return None

    def on_index(sizes: tuple[int, ...], strides: tuple[int, ...],
                 dtype: torch.dtype) -> torch.Tensor:
        if current() == index:
            return fast(sizes, strides, dtype)
        return other(sizes, strides, dtype)

    return on_index


def _allocates_like(alloc: Callable[..., torch.Tensor], where: torch.device) -> bool:
    """Whether ``alloc`` makes tensors of the asked layout and dtype on ``where``."""
    try:
        if where.type == "cuda":
            torch.empty(0, device=where)  # initialises CUDA as torch.empty_strided would
        for sizes, strides, dtype in (((2, 3), (1, 2), torch.float16), ((), (), torch.int64),
                                      ((4, 0, 2), (2, 8, 1), torch.bool)):
            t = alloc(sizes, strides, dtype)
            if (not isinstance(t, torch.Tensor) or t.device.type != where.type
                    or (where.index is not None and t.device != where)
                    or tuple(t.shape) != sizes or t.stride() != strides
                    or t.dtype is not dtype or t.requires_grad):
                return False
    except Exception:  # noqa: BLE001 - a call that fails here is not used
        return False
    return True


def view(t: torch.Tensor, sizes: Sequence[int], strides: Sequence[int],
         offset: int) -> torch.Tensor:
    """``t`` viewed with ``sizes``/``strides``, ``offset`` elements past its start."""
    return t.as_strided(tuple(sizes), tuple(strides), t.storage_offset() + offset)


ReadView = Callable[[torch.Tensor, tuple[int, ...], tuple[int, ...], int], torch.Tensor]
"""``read_view(t, sizes, strides, offset)``: ``t``'s memory with another layout, ``offset``
elements past ``t``'s start (a wrapper's ``_read_view``)."""


@functools.cache
def read_view() -> ReadView:
    """A wrapper's ``_read_view``: :func:`view` made by torch's C++ re-view
    (:func:`._torch.fast_reinterpret`) where it makes what :func:`view` makes (checked
    once per process), else :func:`view` itself. The wrapper calls it for a view that an
    extern op returning a fresh tensor only reads (the operand of a matmul, hundreds a
    training step), and for a buffer placed in a dead buffer's memory: no autograd view
    is needed there, and none is made. ``Tensor.as_strided`` dispatches and records
    the view for autograd: ~1.2 us against ~0.6 us on the CPU machine."""
    fast = fast_reinterpret()
    if fast is None or not _views_like(fast):
        return view
    return fast


def _views_like(fast: Callable[..., torch.Tensor]) -> bool:
    """Whether ``fast(t, sizes, strides, offset)`` gives the tensor :func:`view` gives."""
    try:
        base = torch.arange(24.0)[2:]  # a storage offset of its own
        for sizes, strides, offset in (((2, 3), (1, 2), 0), ((4,), (2,), 3), ((), (), 5)):
            got, want = fast(base, sizes, strides, offset), view(base, sizes, strides, offset)
            if (not isinstance(got, torch.Tensor) or got.dtype is not want.dtype
                    or got.shape != want.shape or got.stride() != want.stride()
                    or got.data_ptr() != want.data_ptr() or got.requires_grad
                    or not torch.equal(got, want)):
                return False
    except Exception:  # noqa: BLE001 - a call that fails here is not used
        return False
    return True


def layout(t: Any, sizes: Sequence[int], strides: Sequence[int]) -> Any:
    """``t`` if it has ``strides``, else a copy laid out with them (extern results
    whose eager strides differ from the traced ones). A result with another number of
    elements than traced is returned as eager made it: some kernels leave an extra
    result empty where torch's shape function gives it a size (``embedding_bag``'s
    ``offset2bag`` when no backward needs it)."""
    if not isinstance(t, torch.Tensor):
        return t
    if t.numel() != math.prod(sizes):
        return t
    if tuple(t.shape) == tuple(sizes) and _same_strides(t, sizes, strides):
        return t
    source = t.reshape(tuple(sizes)) if tuple(t.shape) != tuple(sizes) else t
    if any(n > 1 and s == 0 for n, s in zip(sizes, strides)):
        return _expanded(source, sizes, strides)
    out = torch.empty_strided(tuple(sizes), tuple(strides), dtype=t.dtype, device=t.device)
    out.copy_(source)
    return out


def _expanded(t: torch.Tensor, sizes: Sequence[int], strides: Sequence[int]) -> torch.Tensor:
    """``t`` in a layout where some dims of size > 1 have stride 0 (a result traced as
    expanded: its elements along those dims are equal). A copy into such a layout is
    refused (elements share memory): the first element along each such dim is copied,
    the others alias it, as in the traced result."""
    extent = 1 + sum((n - 1) * s for n, s in zip(sizes, strides))
    base = torch.empty(extent, dtype=t.dtype, device=t.device)
    out = base.as_strided(tuple(sizes), tuple(strides))
    first = tuple(slice(0, 1) if n > 1 and s == 0 else slice(None)
                  for n, s in zip(sizes, strides))
    out[first].copy_(t[first])
    return out


def _same_strides(t: torch.Tensor, sizes: Sequence[int], strides: Sequence[int]) -> bool:
    return all(s == 1 or a == b for s, a, b in zip(sizes, t.stride(), strides))


def check_input(t: Any, name: str, dtype: torch.dtype, sizes: Sequence[int | None],
                strides: Sequence[int] | None, device: str | None = None) -> torch.Tensor:
    """The input ``t`` in the layout the kernels were generated for.

    The wrapper calls this only when its inline test of ``t`` fails, so the checks cost
    nothing on the fast path; they look at metadata only, never at the elements.

    Args:
        t: the value passed for the graph input.
        name: the input's name in the wrapper (for messages).
        dtype: the traced dtype.
        sizes: the traced sizes; ``None`` for a symbolic size (any value).
        strides: the traced strides, or ``None`` when the graph has no generated kernels
            reading the input (symbolic sizes: extern calls only).
        device: the traced device (``"cpu"``, ``"cuda"``, ``"cuda:1"``); ``None`` (wrappers
            written before devices were checked) accepts any.

    Raises:
        TypeError: ``t`` is not a tensor, or its device, dtype or shape differ from the
            traced ones (the program was compiled for another signature). A raw pointer
            never reaches a kernel in that case.
    """
    where = f"compiled graph input {name}"
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{where}: expected a tensor, got {type(t).__name__}")
    if device is not None and not _on_device(t, torch.device(device)):
        raise TypeError(
            f"{where}: expected a tensor on {device}, got one on {t.device} (the program "
            f"was compiled for {device}; move the input with .to({device!r}))")
    rank_ok = t.dim() == len(sizes)
    if t.dtype != dtype or not rank_ok or any(
            s is not None and s != actual for s, actual in zip(sizes, t.shape)):
        expected = ["?" if s is None else s for s in sizes]
        raise TypeError(
            f"{where}: expected {dtype} {expected}, got {t.dtype} {list(t.shape)}")
    if strides is None:
        return t
    # NOTE: with strides given, every size is static (the kernels were generated for it)
    static = [s for s in sizes if s is not None]
    result: torch.Tensor = layout(t, static, strides)
    return result


def _on_device(t: torch.Tensor, device: torch.device) -> bool:
    """Whether ``t`` is on ``device`` (any index of its type when it names none)."""
    if t.device.type != device.type:
        return False
    return device.index is None or t.device.index in (None, device.index)


def assert_checks_passed(errors: torch.Tensor, message: str) -> None:
    """A device-side assert that no run-time check of a CUDA graph failed (the flags in
    the even slots of its error buffer are all 0). Like eager's own CUDA index checks it
    does not synchronize: a failure surfaces at the next synchronization as a CUDA
    "device-side assert triggered" error (``message`` goes to the device's stderr) and
    leaves the CUDA context unusable, as in eager."""
    # NOTE: imported here: ember.runtime._torch imports torch's symbolic-shape machinery
    # (sympy), which a compiled program loaded from the cache does not otherwise need
    from ember.runtime._torch import assert_async

    assert_async(errors[0::2].eq(0).all(), message)


def shape_error(binder: SymbolBinder | None) -> Callable[[list[Any]], None]:
    """The ``_shape_error(inputs)`` a symbolic graph's wrapper calls when its inline test
    of the input sizes, symbol ranges and guards fails: raises the
    :class:`~ember.runtime.ir.symbolic.ShapeError` of ``binder`` naming the input, dim,
    symbol, range or guard and the value."""

    def fail(inputs: list[Any]) -> None:
        if binder is None:
            raise ShapeError("compiled graph inputs: sizes outside the compiled ranges")
        binder.bind(inputs)
        raise ShapeError("compiled graph inputs: the wrapper's size test failed where the "
                         "graph's symbols, ranges and guards hold (a bug in the wrapper)")

    return fail


def check_unbacked(binder: SymbolBinder | None) -> Callable[..., None]:
    """The ``_check_unbacked(symbols, *new)`` a wrapper calls after it binds the unbacked
    symbols ``new`` of one result (``u0 = int(buf2)`` from ``.item()``, ``u0 =
    buf3.size(0)`` from ``nonzero``): raises the interpreter's
    :class:`~ember.runtime.ir.symbolic.ShapeError` naming a symbol's range or a guard
    that ``new`` completes and fails (``SymbolBinder.check_new_symbols``). (Older
    wrappers call it with one symbol, after an int result only.)"""

    def check(symbols: dict[str, int], *new: str) -> None:
        if binder is not None:
            binder.check_new_symbols(symbols, new)

    return check


def custom_result(value: Any, target: str, index: int | None, dtype: torch.dtype,
                  sizes: tuple[int, ...], strides: tuple[int, ...]) -> Any:
    """The ``_custom_result(...)`` a wrapper calls on a custom operator's result whose
    dtype, shape or strides differ from what the operator's fake kernel said: raises
    :class:`~ember.runtime.custom_ops.FakeKernelMismatch` naming the operator and what
    differs; a difference only in the strides of size-1 dims is no mismatch (the
    result is laid out as the kernels expect)."""
    check_fake_kernel(target, index, (dtype, sizes, strides), value)
    return layout(value, sizes, strides)


def make_namespace(kernels: dict[str, Callable[..., None]],
                   constants: dict[str, torch.Tensor],
                   binder: SymbolBinder | None = None) -> dict[str, Any]:
    """The globals a wrapper runs with; ``binder`` checks a symbolic graph's inputs
    (see :func:`shape_error`)."""
    ns: dict[str, Any] = {
        "torch": torch, "aten": torch.ops.aten, "ops": torch.ops,
        "empty_strided": torch.empty_strided, "_view": view, "_layout": layout,
        "_check_input": check_input, "_assert_checks_passed": assert_checks_passed,
        "_custom_result": custom_result, "_aligned": AlignedCopies(),
        "_shape_error": shape_error(binder), "_check_unbacked": check_unbacked(binder),
        "Max": max, "Min": min,
        "constants": constants,
    }
    for name, k in kernels.items():
        if name in ns or not name.isidentifier():
            raise ValueError(f"bad kernel name {name!r} in compiled artifact")
        ns[name] = k
    return ns
