"""ember.frontend: capture PyTorch programs as Ember IR and compile them.

``compile(fn_or_module, backend=...)`` mirrors ``torch.compile``; ``capture(fn, *args)``
returns the ``aten``-dialect Program of one call (tracing capture).
"""

from ember.frontend.api import CompiledModule, compile
from ember.frontend.capture_modes import CAPTURE_MODES, CompileRequest, register_capture_mode
from ember.frontend.compiled import RecompileLimitWarning
from ember.frontend.stats import CompileStats
from ember.frontend.trace import CaptureError, capture

__all__ = [
    "CAPTURE_MODES",
    "CaptureError",
    "CompileRequest",
    "CompileStats",
    "CompiledModule",
    "RecompileLimitWarning",
    "capture",
    "compile",
    "register_capture_mode",
]
from ember.frontend.bytecode import explain  # noqa: E402  strict-mode report
from ember.frontend.bytecode import disable  # noqa: E402  run a function eagerly
from ember.frontend.bytecode import nonstrict  # noqa: E402  trace a region by running it
from ember.frontend.bytecode import allow_break  # noqa: E402  allow named breaks
