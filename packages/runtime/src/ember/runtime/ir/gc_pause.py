"""Python's cyclic garbage collector paused while a cached program is decoded.

Decoding a program (``ember.runtime.ir.serialize.load``) or a capture-cache entry makes
tens of thousands of small lists, dicts and records that all live on (the program
keeps them), and none of them is cyclic garbage. The collector runs a generation-0 pass
every 700 allocations and, in a process that imported torch (millions of tracked
objects), passes over the older generations as well: in a warm start of HF BERT's
training step on the GPU machine it spent 0.19 s of a 0.75 s first call collecting,
most of it during the program's decode. Paused there, the decode's allocations are
looked at once, by the next collection after it, instead of repeatedly while they are
made. The first launch of each stored Triton binary (``TritonKernel._bind_prebuilt``:
Triton's compiled-kernel object, its metadata record type and launcher) pauses it too.

The pause restores the collector's previous state (a nested pause, or a program that
disabled the collector itself, stays as it was). It is process-wide, like the collector:
another thread allocating during the decode is not collected for that time either.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic garbage collector disabled, then as it was."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


__all__ = ["collector_paused"]
