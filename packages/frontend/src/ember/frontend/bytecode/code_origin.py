"""Where a callable's code comes from: the Python standard library or torch (calls into
them are evaluated or recorded, not inlined)."""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import Any

__all__ = ["is_stdlib", "is_torch_code"]

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
