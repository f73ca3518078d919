"""Python's cyclic garbage collector, paused while Ember captures and compiles.

A cold compile allocates a few hundred thousand objects (the fake-tensor machinery torch
imports on first use, sympy, Ember's graphs), and every few thousand surviving objects
Python's collector runs; when the objects that survived since the last full collection
reach a quarter of all long-lived ones, it runs a full one, over every object of the
process (torch's modules included: 300,000 objects and more). During the first compile
of a plain ``nn.Module`` that was four full collections, 0.9 s of a 3.4 s cold compile
on the CPU machine. Paused, the objects the compile leaves behind are collected by the
collector's next runs after it, as any others.

Reference counting still frees what it can while paused; only cycles wait. The pause
covers one capture with the compiles it runs (nested ones included, and compiles in
several threads at once: the collector resumes when the last one ends), and a collector
the user disabled stays disabled.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["collector_paused"]

_lock = threading.Lock()
_active = 0  # compiles running with the collector paused
_resume = False  # whether the collector ran when the first of them began


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with Python's automatic garbage collection off (see the module
    docstring); nests, and is safe to enter from several threads."""
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
