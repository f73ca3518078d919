"""Kernel code generation: one backend per device type behind ``KernelBackend``."""

from __future__ import annotations

import importlib

from ember.inductor.codegen.backend import (
    BACKENDS,
    KernelBackend,
    KernelSource,
    backend_for,
    register_backend,
)

# Each backend module registers itself; a missing optional backend (Triton not installed,
# or not written yet) is skipped here and reported by backend_for().
for _module in ("ember.inductor.codegen.cpp", "ember.inductor.codegen.triton"):
    try:
        importlib.import_module(_module)
    except ImportError as _e:
        if _module.endswith(".cpp"):
            raise
        del _e

__all__ = ["BACKENDS", "KernelBackend", "KernelSource", "backend_for", "register_backend"]
