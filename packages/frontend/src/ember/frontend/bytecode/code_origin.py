"""Where a callable's code comes from: the Python standard library or torch (calls into
them are evaluated or recorded, not inlined)."""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import types
from typing import Any

from ember.frontend._torch import marked_constant

__all__ = ["constant_or_cached", "is_stdlib", "is_torch_code"]

_STDLIB_DIRS = tuple(
    os.path.join(os.path.realpath(p), "")
    for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
)


def is_stdlib(obj: Any) -> bool:
    """A function or class of the Python standard library (not site-packages)."""
    code = getattr(obj, "__code__", None)
    if code is not None:
        if code.co_filename.startswith("<frozen "):
            return True
        path = os.path.realpath(code.co_filename)
        return path.startswith(_STDLIB_DIRS) and "site-packages" not in path
    module = (getattr(obj, "__module__", None) or "").split(".")[0]
    return module in sys.stdlib_module_names and module not in ("builtins", "contextvars")


def is_torch_code(fn: Any) -> bool:
    """A function or class defined in a ``torch`` module."""
    module = getattr(fn, "__module__", None) or ""
    return module == "torch" or module.startswith("torch.")



def constant_or_cached(fn: Any) -> tuple[bool, types.FunctionType | None]:
    """How to call ``fn`` when it is a function marked with ``assume_constant_result``
    (``(True, None)``: call it for real, its result is a constant) or the Python function
    under ``@functools.lru_cache`` / ``@functools.cache``, whose C wrapper cannot be
    interpreted (``(False, function)``: interpret the function; a cache changes when a
    result is computed, not what it is; marked under the cache: ``(True, None)``, as
    torch.compile). ``(False, None)`` for any other callable and for torch's own
    functions (recorded as torch code)."""
    target = fn
    if isinstance(fn, functools._lru_cache_wrapper):
        target = getattr(fn, "__wrapped__", None)
    elif not isinstance(fn, types.FunctionType):
        return False, None
    if not isinstance(target, types.FunctionType) or is_torch_code(target):
        return False, None
    if marked_constant(target):
        return True, None
    return False, (target if target is not fn else None)
