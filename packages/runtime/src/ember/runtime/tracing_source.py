"""Finding the user's source line for a recorded op: the innermost Python frame that is
not inside torch, Ember or the standard library."""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
from types import FrameType, TracebackType

import torch
from ember.runtime.ir import SourceLocation


def _library_roots() -> tuple[str, ...]:
    roots = [os.path.dirname(torch.__file__)]
    import ember  # a PEP 420 namespace: one directory per installed stage

    roots.extend(str(p) for p in getattr(ember, "__path__", []))
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.append(path)
    return tuple(os.path.join(os.path.realpath(r), "") for r in roots)


_LIBRARY_ROOTS = _library_roots()
_IS_LIBRARY: dict[str, bool] = {}


def _is_library_file(filename: str) -> bool:
    known = _IS_LIBRARY.get(filename)
    if known is None:
        path = os.path.realpath(filename)
        # NOTE: site-packages lies under the stdlib prefix on some layouts; a file in
        # site-packages that is not torch/ember is user code (e.g. transformers models).
        in_site = "site-packages" in path or "dist-packages" in path
        known = any(
            path.startswith(root) and (not in_site or "site-packages" in root)
            for root in _LIBRARY_ROOTS
        ) or filename.startswith("<frozen")
        _IS_LIBRARY[filename] = known
    return known


def is_library_file(filename: str) -> bool:
    """Whether ``filename`` belongs to torch, Ember or the standard library."""
    return _is_library_file(filename)


def user_source_location_of_traceback(tb: TracebackType | None) -> SourceLocation | None:
    """The innermost user frame (outside torch/ember/stdlib) of a traceback: where the
    user's code was when an exception was raised."""
    found: SourceLocation | None = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not _is_library_file(filename):
            line = tb.tb_lineno
            found = SourceLocation(filename, line, tb.tb_frame.f_code.co_name,
                                   linecache.getline(filename, line).strip())
        tb = tb.tb_next
    return found


def user_source_location(frame: FrameType | None = None) -> SourceLocation | None:
    """The location of the innermost frame outside torch/ember/stdlib, starting at
    ``frame`` (default: the caller's frame), or None when there is none."""
    f: FrameType | None = frame if frame is not None else sys._getframe(1)
    while f is not None:
        filename = f.f_code.co_filename
        if not _is_library_file(filename):
            line = f.f_lineno or 0
            text = linecache.getline(filename, line).strip()
            return SourceLocation(filename, line, f.f_code.co_name, text)
        f = f.f_back
    return None
