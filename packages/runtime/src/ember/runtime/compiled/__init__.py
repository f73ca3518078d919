"""Loading and running ``compiled``-dialect programs (see README.md here).

Needs no compiler stage installed: wrappers are Python source, kernels are C++ (built
with g++ and cached) or Triton source.
"""

from ember.runtime.compiled.artifact import load_artifact
from ember.runtime.compiled.loader import LAUNCHERS, graph_entry, load_executor

__all__ = ["LAUNCHERS", "graph_entry", "load_artifact", "load_executor"]
