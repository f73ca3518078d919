"""Which kernel backend serves a device type: the built-in ones, found by convention,
and any registered with :func:`register_backend`.

The built-in backends are imported only when first asked for, by module name
(:data:`BUILTIN_BACKENDS`), so that this module imports no code generator.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch
from ember.inductor.codegen.backend import KernelBackend
from ember.inductor.loop_ir import Kernel

#: device type -> (module, class) of the built-in backend serving it
BUILTIN_BACKENDS: dict[str, tuple[str, str]] = {
    "cpu": ("ember.inductor.codegen.cpp.backend", "CppBackend"),
    "cuda": ("ember.inductor.codegen.triton.backend", "TritonBackend"),
}

#: device type -> factory, registered explicitly; these take precedence over the built-ins
BACKENDS: dict[str, Callable[[], KernelBackend]] = {}


def register_backend(device_type: str, factory: Callable[[], KernelBackend]) -> None:
    """Make ``factory()`` the kernel backend for ``device_type`` (replacing a built-in
    one)."""
    BACKENDS[device_type] = factory


def backend_for(device_type: str) -> KernelBackend:
    """The backend for ``device_type``.

    Raises:
        RuntimeError: when no backend serves that device type, or its module cannot be
            imported (the message names the import error).
    """
    factory = BACKENDS.get(device_type)
    if factory is not None:
        return factory()
    if device_type not in BUILTIN_BACKENDS:
        available = sorted(set(BACKENDS) | set(BUILTIN_BACKENDS))
        raise RuntimeError(
            f"no Ember kernel backend for device type {device_type!r}; available: {available}"
        )
    module_name, class_name = BUILTIN_BACKENDS[device_type]
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise RuntimeError(
            f"the Ember kernel backend for device type {device_type!r} ({module_name}) "
            f"cannot be imported: {e}"
        ) from e
    backend = getattr(module, class_name)()
    if not isinstance(backend, KernelBackend):
        raise RuntimeError(f"{module_name}.{class_name} is not a KernelBackend")
    return backend


def in_one_part(kernel: Kernel, device: str, first: str, second: str) -> bool:
    """Whether one part of ``kernel`` touches both buffers ``first`` and ``second``
    (:meth:`KernelBackend.concurrent_parts` of ``device``'s backend), so that a write of
    one into the other's memory comes after the reads; True when every program runs the
    whole kernel."""
    parts = backend_for(torch.device(device).type).concurrent_parts(kernel)
    return parts is None or any(first in p and second in p for p in parts)
