"""Lowering of core-functional graphs to loop nodes (see :mod:`.graph_lowering`).

Importing this package registers every rule in the one table
:data:`~ember.inductor.lowering.registry.LOWERINGS`.
"""

from ember.inductor.lowering import externs, indexing, pointwise, reductions, views  # noqa: F401
from ember.inductor.lowering.registry import EXTERN_OPS, LOWERINGS, NotLowerable, lowering

__all__ = ["EXTERN_OPS", "LOWERINGS", "NotLowerable", "lowering"]
