"""ember.frontend: capture PyTorch programs as Ember IR and compile them.

``compile(fn_or_module, backend=...)`` mirrors ``torch.compile``; ``capture(fn, *args)``
returns the ``aten``-dialect Program of one call (tracing capture).

NOTE: ``capture``, ``CaptureError``, ``RecompileLimitWarning``, ``triton_op``,
``wrap_triton`` and ``cudagraph_mark_step_begin`` are imported on first use (PEP 562
``__getattr__``, :data:`_LAZY`): they pull in the tracing capture and other machinery
that a process whose calls the capture cache answers (a warm start) never runs
(``tests/test_warm_imports.py`` checks what a warm start imports).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ember.frontend.api import CompiledModule, compile
from ember.frontend.bytecode import allow_break as allow_break  # allow breaks (fullgraph)
from ember.frontend.bytecode import disable as disable  # run a function eagerly (a break)
from ember.frontend.bytecode import explain as explain  # strict mode: graphs, breaks, guards
from ember.frontend.bytecode import nonstrict as nonstrict  # trace a region by running it
from ember.frontend.capture_modes import CAPTURE_MODES, CompileRequest, register_capture_mode
from ember.frontend.dynamic import (
    DynamicDimError,
    mark_dynamic,
    mark_static,
    maybe_mark_dynamic,
)
from ember.frontend.stats import CompileStats

if TYPE_CHECKING:
    from ember.frontend.compiled import RecompileLimitWarning
    from ember.frontend.trace import CaptureError, capture
    from ember.frontend.triton_custom_op import triton_op, wrap_triton
    from ember.runtime.cudagraphs_pool import mark_step_begin as cudagraph_mark_step_begin

__all__ = [
    "CAPTURE_MODES",
    "CaptureError",
    "CompileRequest",
    "CompileStats",
    "CompiledModule",
    "DynamicDimError",
    "RecompileLimitWarning",
    "capture",
    "compile",
    "cudagraph_mark_step_begin",
    "mark_dynamic",
    "mark_static",
    "maybe_mark_dynamic",
    "register_capture_mode",
    "triton_op",
    "wrap_triton",
]

_LAZY: dict[str, tuple[str, str]] = {
    "CaptureError": ("ember.frontend.trace", "CaptureError"),
    "capture": ("ember.frontend.trace", "capture"),
    "RecompileLimitWarning": ("ember.frontend.compiled", "RecompileLimitWarning"),
    # Triton kernels as custom operators
    "triton_op": ("ember.frontend.triton_custom_op", "triton_op"),
    "wrap_triton": ("ember.frontend.triton_custom_op", "wrap_triton"),
    # CUDA graphs: a training step begins
    "cudagraph_mark_step_begin": ("ember.runtime.cudagraphs_pool", "mark_step_begin"),
}


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'ember.frontend' has no attribute {name!r}")
    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
