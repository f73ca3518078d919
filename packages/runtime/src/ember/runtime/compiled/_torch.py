"""The private torch APIs that running a compiled program uses, in one place.

Kept apart from ``ember.runtime._torch``, which imports torch's symbolic-shape machinery
(sympy, fake tensors: ~0.4 s): a compiled program loaded from the cache runs without it.
A torch upgrade that moves one of these touches only this file.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["fast_empty_strided", "metadata_checker", "raw_current_device",
           "release_saved_tensors", "view_base"]


def metadata_checker(tensors: Sequence[torch.Tensor]) -> Callable[..., bool] | None:
    """A C++ check ``check(*tensors) -> bool`` that tensors have the Python type, dtype,
    device, dispatch keys, requires_grad, sizes and strides ``tensors`` have now (torch's
    ``torch._C._dynamo.guards.TensorGuards``: one call for all of them, where reading
    them in Python costs ~0.3 us per tensor; not the storage offset, not the data
    pointer), or None where it is missing or fails a self-test (a changed size, type or
    requires_grad must fail it)."""
    if not _checker_works():
        return None
    check: Callable[..., bool] = _tensor_guards(tensors).check
    return check


def _tensor_guards(tensors: Sequence[torch.Tensor]) -> Any:
    from torch._C._dynamo.guards import TensorGuards

    sizes: Any = [list(t.shape) for t in tensors]  # every size and stride exact
    strides: Any = [list(t.stride()) for t in tensors]
    return TensorGuards(*tensors, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides)


@functools.cache
def _checker_works() -> bool:
    try:
        probe = [torch.zeros(2, 3), torch.nn.Parameter(torch.zeros(4))]
        check = _tensor_guards(probe).check
        return bool(check(*probe) is True
                    and check(probe[0], torch.nn.Parameter(torch.zeros(5))) is False
                    and check(probe[0], torch.zeros(4)) is False
                    and check(torch.zeros(3, 2), probe[1]) is False
                    and check(probe[0].t().contiguous().t(), probe[1]) is False
                    and check(probe[0], torch.nn.Parameter(torch.zeros(4), requires_grad=False))
                    is False)
    except Exception:  # noqa: BLE001 - any failure means the C++ check is unusable
        return False


def view_base(t: torch.Tensor) -> torch.Tensor | None:
    """The tensor ``t`` is an autograd view of (``Tensor._base``), or None."""
    return t._base if t._is_view() else None


def raw_current_device() -> Callable[[], int] | None:
    """The index of the current CUDA device as one C call (``torch.cuda.current_device``
    without its Python frames, which first make sure CUDA is initialised: a launch on a
    CUDA tensor implies it); None where this torch has no such call (CPU builds)."""
    getter = getattr(torch._C, "_cuda_getDevice", None)
    return getter if callable(getter) else None


_FAST_EMPTY = {"cpu": "_empty_strided_cpu", "cuda": "_empty_strided_cuda"}


def fast_empty_strided(device: str) -> Callable[..., torch.Tensor] | None:
    """torch's C++ allocation ``alloc(sizes, strides, dtype)`` for ``device`` ("cpu", or
    "cuda": the current CUDA device), the one torch.compile's wrappers call: no Python
    argument parsing, no device string parsed (``torch.empty_strided`` with
    ``device='cpu'`` costs ~1.9 us a call on the CPU machine, this ~0.5 us). None for
    other devices and where this torch lacks it. Unlike ``torch.empty_strided`` it never
    fills the memory (``torch.utils.deterministic.fill_uninitialized_memory``): use it
    only for buffers written before they are read."""
    name = _FAST_EMPTY.get(device)
    if name is None:
        return None
    try:
        from torch._C._dynamo import guards
    except ImportError:
        return None
    alloc = getattr(guards, name, None)
    return alloc if callable(alloc) else None


def fast_reinterpret() -> Callable[..., torch.Tensor] | None:
    """torch's C++ ``reinterpret(t, sizes, strides, offset)``: a tensor over ``t``'s
    storage with ``sizes``/``strides``, ``offset`` elements past ``t``'s own storage
    offset, the one torch.compile's wrappers call (about half of ``Tensor.as_strided``'s
    cost on the CPU machine: no dispatch, no autograd view record). The result is no
    autograd view of ``t`` and has its own version counter: use it only for a tensor that
    is read, never written, while ``t`` is alive, or for memory nobody else sees. None
    where this torch lacks it."""
    try:
        from torch._C._dynamo import guards
    except ImportError:
        return None
    fn = getattr(guards, "_reinterpret_tensor", None)
    return fn if callable(fn) else None


def static_cuda_launcher() -> tuple[Callable[..., int], Callable[..., None]] | None:
    """torch's C++ launcher of Triton binaries (``torch._C._StaticCudaLauncher``, what
    torch.compile's wrappers launch through) as ``(load, launch)``: ``load(cubin_path,
    name, shared_bytes, device_index)`` loads a binary and gives its function handle;
    ``launch(function, gx, gy, gz, num_warps, shared_bytes, kinds, args, stream)`` runs
    it. None where this torch has none (CPU builds)."""
    launcher = getattr(torch._C, "_StaticCudaLauncher", None)
    if launcher is None:
        return None
    raw_load, launch = launcher._load_kernel, launcher._launch_kernel

    def load(path: str, name: str, shared: int, device: int) -> int:
        try:
            loaded = raw_load(path, name, shared, device)
        except TypeError:  # a torch whose loader takes no device: the current one
            loaded = raw_load(path, name, shared)
        return int(loaded[0])  # (function, registers, spills)

    return load, launch


def release_saved_tensors(ctx: Any) -> None:
    """Drop the references an autograd ``Function``'s node holds to the tensors its
    forward saved (``ctx.save_for_backward``), inside its ``backward``, unless the graph
    is kept (``retain_graph=True``): torch's ``maybe_clear_saved_tensors``, which its
    own compiled backward calls. Until then the node keeps every saved activation alive
    to the end of the backward. A torch without it keeps them (no error)."""
    clear = getattr(ctx, "maybe_clear_saved_tensors", None)
    if clear is not None:
        clear()
