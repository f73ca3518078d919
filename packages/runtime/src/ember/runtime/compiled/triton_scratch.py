"""Global scratch memory for Triton binaries, in every thread that launches one.

Some kernels need global memory that Triton asks for at each launch; it asks the
allocator installed with ``triton.set_allocator``. The inductor's TMA matmul variant is
one of them: its device-side tensor descriptors (``tl.make_tensor_descriptor``) live in
that memory. A compiled binary's metadata says how much it needs
(``global_scratch_size``, the same field in Triton 3.3 to 3.9).

Triton keeps the allocator in a context variable, so each thread starts with none
(``RuntimeError: ... no allocator was set``): a compiled model called from a serving
thread, a DataLoader worker thread or a thread pool would fail where the main thread
works. The launcher (:mod:`.triton_kernel`) therefore calls
:func:`ensure_scratch_allocator` before launching a binary that needs scratch memory
(and before a launch through Triton's JIT, which has not told yet what it needs). The
check is one context-variable read; the first call in a thread (or in a context that
does not inherit one, an asyncio task created before) installs
:func:`scratch_allocation`, a ``torch.empty`` on the current CUDA device, which is the
device Triton launches on, and so on torch's current stream of that device, which is
Triton's launch stream: the caching allocator reuses it once the kernel is done.

An allocator the thread already has (the user's own ``triton.set_allocator``) is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import torch

#: whether this context has a scratch allocator (ours or the user's). NOTE: a context
#: variable like Triton's own allocator slot, not a thread-local: both follow the same
#: scoping (a new thread has neither; an asyncio task copies both)
_ready: ContextVar[bool] = ContextVar("ember_triton_scratch_ready", default=False)


def scratch_allocation(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Triton's allocator protocol: ``size`` bytes aligned to ``alignment`` on the current
    CUDA device (``stream``: the launch's, torch's current one there; the caching
    allocator orders the memory's reuse on it). The memory is freed when Triton drops
    the buffer after the launch."""
    buffer = torch.empty(size, dtype=torch.int8, device="cuda")
    if alignment <= 1 or buffer.data_ptr() % alignment == 0:
        return buffer  # the caching allocator's blocks are 512-byte aligned
    padded = torch.empty(size + alignment, dtype=torch.int8, device="cuda")
    skip = -padded.data_ptr() % alignment
    return padded[skip:skip + size]


def _has_allocator() -> bool:
    """Whether Triton has an allocator in this context (the user's, or one set before
    Ember's flag was). NOTE: reads Triton's private slot (a ``ContextVar`` whose default
    is a ``NullAllocator`` in Triton 3.3 to 3.9, or the allocator itself where a Triton
    keeps it in a plain global); a Triton without it counts as none."""
    try:
        from triton.runtime import _allocation
    except ImportError:
        return False
    slot = getattr(_allocation, "_allocator", None)
    null = getattr(_allocation, "NullAllocator", None)
    if slot is None or not isinstance(null, type):
        return False
    current = slot.get() if isinstance(slot, ContextVar) else slot
    return not isinstance(current, null)


def ensure_scratch_allocator() -> None:
    """Make sure the calling thread (context) has a Triton scratch allocator: installs
    :func:`scratch_allocation` unless one is set (module doc). Cheap after the first
    call in a thread.

    Raises:
        ImportError: when Triton is not installed.
    """
    if _ready.get():
        return
    if not _has_allocator():
        import triton

        triton.set_allocator(scratch_allocation)
    _ready.set(True)


def needs_global_scratch(compiled: Any) -> bool:
    """Whether a compiled Triton binary asks for global scratch memory at launch (its
    metadata's ``global_scratch_size`` is positive; a binary without the field, of an
    older Triton, needs none)."""
    metadata = getattr(compiled, "metadata", None)
    size = getattr(metadata, "global_scratch_size", 0)
    if isinstance(metadata, dict):
        size = metadata.get("global_scratch_size", 0)
    return bool(size) and int(size) > 0


Launch = Callable[[tuple[int, ...], tuple[Any, ...]], None]


def with_scratch_allocator(launch: Launch) -> Launch:
    """``launch`` preceded by :func:`ensure_scratch_allocator` (for a binary that
    :func:`needs_global_scratch`)."""
    def run(grid: tuple[int, ...], args: tuple[Any, ...]) -> None:
        if not _ready.get():
            ensure_scratch_allocator()
        launch(grid, args)

    return run


__all__ = [
    "ensure_scratch_allocator",
    "needs_global_scratch",
    "scratch_allocation",
    "with_scratch_allocator",
]
