"""Running generated Triton kernels without a GPU, for tests.

:func:`triton_for_cpu` makes the inductor generate Triton kernels for CPU tensors (the
backend registered for ``cuda`` also serves ``cpu``); the runtime's Triton launcher then
runs them in Triton's interpreter, because the tensors are on the CPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ember.inductor.codegen.backend import BACKENDS, register_backend
from ember.inductor.codegen.triton.backend import TritonBackend


@contextlib.contextmanager
def triton_for_cpu() -> Iterator[None]:
    """Within the block, CPU graphs get Triton kernels (run by Triton's interpreter)."""
    from ember.inductor import codegen  # noqa: F401  (registers the built-in backends)

    saved = BACKENDS.get("cpu")
    register_backend("cpu", TritonBackend)
    try:
        yield
    finally:
        if saved is None:
            BACKENDS.pop("cpu", None)
        else:
            BACKENDS["cpu"] = saved
