"""ember.runtime: the IR, its serialization, the reference interpreter, the pipeline
that composes the stages, and the loader of compiled artifacts.

NOTE: the public names below are imported on first use (PEP 562 ``__getattr__``):
``import ember.runtime`` (which every ``ember.runtime.*`` import runs) stays cheap, so a
process that loads a compiled program from the cache imports only what it runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ember.runtime.compiled.artifact import load_artifact
    from ember.runtime.cudagraphs_pool import mark_step_begin as cudagraph_mark_step_begin
    from ember.runtime.export_import import import_exported
    from ember.runtime.fx_import import import_fx

__all__ = ["cudagraph_mark_step_begin", "import_exported", "import_fx", "load_artifact"]

_LAZY: dict[str, tuple[str, str]] = {
    "load_artifact": ("ember.runtime.compiled.artifact", "load_artifact"),
    # CUDA graphs: a training step begins
    "cudagraph_mark_step_begin": ("ember.runtime.cudagraphs_pool", "mark_step_begin"),
    "import_exported": ("ember.runtime.export_import", "import_exported"),
    "import_fx": ("ember.runtime.fx_import", "import_fx"),
}


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'ember.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
