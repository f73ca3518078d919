"""Loading and running ``compiled``-dialect programs (see README.md here).

Needs no compiler stage installed: wrappers are Python source, kernels are C++ (built
with g++ and cached) or Triton source.

The package's names are imported on first use: generated Triton kernels import
:mod:`.triton_math` from here, and a process that only compiles them (the Triton worker,
:mod:`ember.runtime.triton_worker`) must not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ember.runtime.compiled.artifact import load_artifact
    from ember.runtime.compiled.loader import LAUNCHERS, graph_entry, load_executor

_HOMES = {"load_artifact": "artifact", "LAUNCHERS": "loader", "graph_entry": "loader",
          "load_executor": "loader"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


__all__ = ["LAUNCHERS", "graph_entry", "load_artifact", "load_executor"]
