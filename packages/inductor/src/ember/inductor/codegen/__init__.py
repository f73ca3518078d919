"""Kernel code generation: one backend per device type behind ``KernelBackend``.

``backend.py`` is the interface (code generation and device policy), ``registry.py``
finds the backend of a device type, ``cpp/`` and ``triton/`` are the built-in backends,
``wrapper.py`` renders a schedule as the wrapper's Python.
"""

from __future__ import annotations

from ember.inductor.codegen.backend import KernelBackend, KernelSource
from ember.inductor.codegen.registry import BACKENDS, backend_for, register_backend

__all__ = ["BACKENDS", "KernelBackend", "KernelSource", "backend_for", "register_backend"]
