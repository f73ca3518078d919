"""Python's cyclic garbage collector, paused while Ember captures, compiles or decodes.

- **Capture and compile.** A cold compile allocates a few hundred thousand objects (the
  fake-tensor machinery torch imports on first use, sympy, Ember's graphs), and every few
  thousand surviving objects Python's collector runs. When the objects that survived since
  the last full collection reach a quarter of all long-lived ones, it runs a full one over
  every object of the process (torch's modules included: 300,000 objects and more).
  During the first compile of a plain ``nn.Module`` that was four full collections, 0.9 s
  of a 3.4 s cold compile on the CPU machine.
- **Decode.** Decoding a program (``ember.runtime.ir.serialize.load``) or a capture-cache
  entry makes tens of thousands of small lists, dicts and records that all live on (the
  program keeps them), and none of them is cyclic garbage. In a warm start of HF BERT's
  training step on the GPU machine the collector spent 0.19 s of a 0.75 s first call,
  most of it during the program's decode. The first launch of each stored Triton binary
  (``TritonKernel._bind_prebuilt``) pauses it too.

Paused, the objects made meanwhile are looked at by the collector's next runs after the
pause, as any others; reference counting still frees what it can, only cycles wait. The
pause nests, and is safe to enter from several threads at once (compiles in several
threads): the collector resumes when the last pause ends, and only if it ran when the
first began (a collector the user disabled stays disabled). It is process-wide, like the
collector: another thread allocating meanwhile is not collected for that time either.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_active = 0  # pauses in progress, in every thread
_resume = False  # whether the collector ran when the first of them began


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with Python's automatic garbage collection off (module doc)."""
    global _active, _resume
    with _lock:
        if _active == 0:
            _resume = gc.isenabled()
            gc.disable()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _resume:
                gc.enable()


__all__ = ["collector_paused"]
