"""16-byte-aligned base addresses for Triton kernels that read tensors through TMA.

A TMA tensor descriptor (``tl.make_tensor_descriptor``) takes a global address that must
be a multiple of 16 bytes. The inductor checks the row strides when it chooses the TMA
matmul variant, but a tensor's address is known only at run time: a graph input may be
a view that starts inside its storage (``x[1:]`` of a bfloat16 tensor starts 2 bytes
in; Ember's guards accept it again and again once it was traced so), or a tensor built
on an unaligned storage (``torch.frombuffer``, ``as_strided`` of an offset storage).
Such an address would fault or read garbage.

So the generated wrapper tests each buffer a TMA kernel reads through a descriptor
inline, ``arg0.data_ptr() % 16 == 0`` (one modulo, no call), and only when that fails
calls ``_aligned(arg0, 'arg0', 'kernel0')``, an :class:`AlignedCopies` of the graph's
namespace: the kernel then reads :func:`aligned_copy`'s fresh copy, for that call only.
The wrapper keeps the original for everything else (an output returning the input, an
in-place write, another kernel), so aliasing and mutations are as they were. The first
copy of each loaded graph is logged under ``EMBER_LOGS=autotune`` (where the TMA choice
logs); every copy is counted (:func:`unaligned_copies`).

Why a copy and not a second kernel: the copy costs one ``memcpy`` of the operand on a
path that well-behaved callers never take, keeps a single kernel per matmul (no
pointer-template twin compiled and carried along for a rare case), and is correct for
every layout the kernel accepts.
"""

from __future__ import annotations

import threading

import torch
from ember.runtime.logs import log

#: the base-address alignment a TMA descriptor needs, in bytes
TMA_ALIGN_BYTES = 16

_lock = threading.Lock()
_copies = 0


def unaligned_copies() -> int:
    """How many unaligned tensors the wrappers of this process copied for TMA kernels."""
    return _copies


def aligned_copy(t: torch.Tensor, align: int = TMA_ALIGN_BYTES) -> torch.Tensor:
    """``t``'s values in fresh memory, with ``t``'s sizes and strides (overlapping and
    gapped layouts included: the whole address span ``t`` covers is copied in one piece)
    and a base address that is a multiple of ``align`` bytes; ``t`` itself when its
    address already is or when it holds no element. The copy is detached."""
    if t.data_ptr() % align == 0 or t.numel() == 0:
        return t
    span = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    source = t.detach().as_strided((span,), (1,))
    # NOTE: torch's allocators (the CUDA caching one, the CPU one) return blocks aligned
    # to at least 64 bytes; a padded buffer covers any other allocator
    flat = torch.empty(span, dtype=t.dtype, device=t.device)
    if flat.data_ptr() % align:
        padded = torch.empty(span + align, dtype=t.dtype, device=t.device)
        skip = -padded.data_ptr() % align // t.element_size()
        flat = padded[skip:skip + span]
        if flat.data_ptr() % align:
            raise RuntimeError(f"cannot place a {t.dtype} tensor at a {align}-byte "
                               f"aligned address (element size {t.element_size()})")
    flat.copy_(source)
    return flat.as_strided(t.shape, t.stride())


class AlignedCopies:
    """The ``_aligned(tensor, buffer, kernel)`` of one loaded graph's wrapper, called
    when ``tensor`` (the wrapper's ``buffer``, read by ``kernel`` through a TMA
    descriptor) is not 16-byte aligned: returns :func:`aligned_copy`, logs the graph's
    first copy and counts each one."""

    def __init__(self) -> None:
        self.copies = 0

    def __call__(self, t: torch.Tensor, buffer: str, kernel: str) -> torch.Tensor:
        global _copies
        with _lock:
            self.copies += 1
            _copies += 1
            first = self.copies == 1
        if first:
            log("autotune", f"{buffer} (read by {kernel} through a TMA descriptor) is at an "
                            f"address {t.data_ptr() % TMA_ALIGN_BYTES} bytes past a "
                            f"multiple of {TMA_ALIGN_BYTES}: copied into aligned memory "
                            "for each such call (logged once per compiled graph)")
        return aligned_copy(t)


__all__ = ["TMA_ALIGN_BYTES", "AlignedCopies", "aligned_copy", "unaligned_copies"]
