"""The platform key of Triton's launcher cache, computed once per process.

Triton builds (or, cached, loads) a small C launcher for each compiled kernel it runs.
Its cache key includes ``triton.runtime.build.platform_key()``, which calls
``platform.architecture()``, which runs the system's ``file`` command on the Python
executable in a subprocess: 1-6 ms per kernel, on every kernel's first launch in every
process, serially. A warm start of a 121-kernel training step paid it 121 times. Triton
3.9 caches the key itself (``functools.lru_cache``); Triton 3.6, the GPU machine's,
does not.

:func:`cache_platform_key` gives a Triton whose ``platform_key`` is an uncached plain
function the same function with its result kept (the machine, the OS and the
executable's architecture do not change while a process runs). A Triton that already
caches it, or has no such function, is left alone. Applied when Ember first imports
Triton (:func:`.triton_kernel._import_triton`); logged under ``cache``.
"""

from __future__ import annotations

import functools
import threading
import types
from typing import Any

from ember.runtime.logs import log

_lock = threading.Lock()
_done = False


def cache_platform_key(triton_build: Any | None = None) -> bool:
    """Keep ``platform_key``'s result in ``triton_build`` (default: Triton's
    ``triton.runtime.build`` module, looked at once per process). Returns whether this
    call replaced the function."""
    global _done
    if triton_build is not None:
        return _cache_in(triton_build)
    if _done:
        return False
    try:
        from triton.runtime import build
    except ImportError:
        return False
    replaced = _cache_in(build)
    _done = True
    return replaced


def _cache_in(module: Any) -> bool:
    with _lock:
        key = getattr(module, "platform_key", None)
        if not isinstance(key, types.FunctionType):  # cached already, or absent
            return False
        setattr(module, "platform_key", functools.lru_cache(maxsize=1)(key))
    log("cache", "Triton's launcher-cache platform key is computed once per process "
                 "(this Triton runs the `file` command for it at each kernel's launcher)")
    return True


__all__ = ["cache_platform_key"]
