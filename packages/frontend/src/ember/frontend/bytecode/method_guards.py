"""Guards of a bound method read from outside the captured code (``Capture.wrap``).

A bound method is a fresh object at every read (``opt.zero_grad``), so it is guarded by
its function: by code for the user's functions (so that ``obj.go = f`` recompiles).

Its object is usually guarded where it was read (``opt`` in ``opt.zero_grad()``). A
method kept whole instead, in a closure cell, a global or an argument
(``zg = opt.zero_grad``; ``zg()`` in the compiled code), has an object the capture never
read. That object is read through the method's source (``zg.__self__``), and the
function by identity (``zg.__func__``), so that what the inlined body reads of the
object is guarded: the parameters' ``.grad`` that ``zero_grad`` clears, which were
taken as they were at capture and silently kept from the second call on.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from ember.frontend.bytecode.sources import AttrSource
from ember.runtime.tracing_source import is_library_file

__all__ = ["guard_method"]


def guard_method(cap: Any, method: types.MethodType, source: Any) -> None:
    """Guard ``method`` (not bound to a module: those are guarded through
    ``MethodFuncSource``) read through ``source``."""
    func = method.__func__
    if isinstance(func, types.FunctionType) and not is_library_file(
            func.__code__.co_filename):
        cap.guard("id", AttrSource(AttrSource(source, "__func__"), "__code__"), func.__code__)
    owner = method.__self__
    if (source is None or cap.source_of(owner) is not None
            or isinstance(owner, (torch.Tensor, type, types.ModuleType))
            or type(owner).__module__ == "builtins"):
        return  # guarded where read, a tensor or class, or a builtin container's method
    cap.guard("id", AttrSource(source, "__func__"), func)
    cap.wrap(owner, AttrSource(source, "__self__"))
