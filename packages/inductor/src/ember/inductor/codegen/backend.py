"""The kernel-backend interface: loop-IR kernel -> source code, chosen by device.

A backend turns one :class:`~ember.inductor.loop_ir.Kernel` into a
:class:`KernelSource`. The wrapper calls every generated kernel the same way,
``name(*tensors)`` with the tensors of ``Kernel.buffers`` in order; the loader in
``ember.runtime.compiled`` builds that callable from the ``KernelSource`` stored in the
artifact, picking the launcher by ``KernelSource.lang`` (``"cpp"``: compiled with g++ and
loaded with ctypes; ``"triton"``: the Triton helper's launcher).

Backends are registered by device type (``cpu`` -> C++, ``cuda`` -> Triton) in
:data:`BACKENDS`; :func:`backend_for` fails loudly when none matches.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field

from ember.inductor.loop_ir import Kernel


@dataclass(frozen=True)
class KernelSource:
    """Generated code for one kernel.

    ``lang``: ``"cpp"`` or ``"triton"``; ``name``: the wrapper's name for the kernel;
    ``source``: the code; ``entry``: the symbol / function to call in it; ``meta``:
    JSON-able launch data the runtime launcher needs (the Triton grid, block sizes,
    argument dtypes, ...).
    """

    lang: str
    name: str
    source: str
    entry: str
    meta: dict[str, object] = field(default_factory=dict)


class KernelBackend(abc.ABC):
    """Generates kernels for one device type."""

    #: the torch device type this backend serves ("cpu", "cuda")
    device_type: str = ""

    @abc.abstractmethod
    def generate(self, kernel: Kernel) -> KernelSource:
        """Source code for ``kernel``.

        Raises:
            NotImplementedError: naming the statement or op the backend cannot express
            (the caller then runs the kernel's nodes as extern calls).
        """

    def bundle(self, sources: list[KernelSource]) -> list[KernelSource]:
        """Optionally merge the kernels of one graph into fewer compilation units
        (the C++ backend emits one file per graph, so g++ runs once). Default: as is."""
        return sources


# device type -> factory. Backends register themselves on import (see codegen/__init__).
BACKENDS: dict[str, Callable[[], KernelBackend]] = {}


def register_backend(device_type: str, factory: Callable[[], KernelBackend]) -> None:
    """Register the kernel backend for ``device_type``."""
    BACKENDS[device_type] = factory


def backend_for(device_type: str) -> KernelBackend:
    """The backend for ``device_type``.

    Raises:
        RuntimeError: when no backend serves that device type.
    """
    from ember.inductor import codegen  # noqa: F401  (registers the built-in backends)

    if device_type not in BACKENDS:
        raise RuntimeError(
            f"no Ember kernel backend for device type {device_type!r}; "
            f"available: {sorted(BACKENDS)}"
        )
    return BACKENDS[device_type]()
