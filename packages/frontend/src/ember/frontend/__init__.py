"""ember.frontend: capture PyTorch programs as Ember IR and compile them.

``compile(fn_or_module, backend=...)`` mirrors ``torch.compile``; ``capture(fn, *args)``
returns the ``aten``-dialect Program of one call (tracing capture).
"""

from ember.frontend.api import CompiledModule, compile
from ember.frontend.bytecode import allow_break as allow_break  # allow breaks (fullgraph)
from ember.frontend.bytecode import disable as disable  # run a function eagerly (a break)
from ember.frontend.bytecode import explain as explain  # strict mode: graphs, breaks, guards
from ember.frontend.bytecode import nonstrict as nonstrict  # trace a region by running it
from ember.frontend.capture_modes import CAPTURE_MODES, CompileRequest, register_capture_mode
from ember.frontend.compiled import RecompileLimitWarning
from ember.frontend.dynamic import (
    DynamicDimError,
    mark_dynamic,
    mark_static,
    maybe_mark_dynamic,
)
from ember.frontend.stats import CompileStats
from ember.frontend.trace import CaptureError, capture
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
]
