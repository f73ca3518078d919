"""Lowering of core-functional graphs to loop nodes (see :mod:`.graph_lowering`).

Importing this package registers every rule in the one table
:data:`~ember.inductor.lowering.registry.LOWERINGS`.
"""

from ember.inductor.lowering import (  # noqa: F401
    backward,
    externs,
    float_math,
    grid_sampler,
    indexed_writes,
    indexing,
    pointwise,
    pooling,
    random,
    reductions,
    scans,
    scatter,
    user_kernels,
    views,
)
from ember.inductor.lowering.registry import EXTERN_OPS, LOWERINGS, NotLowerable, lowering


def lowered_ops() -> list[str]:
    """Every op with a loop lowering, sorted."""
    return sorted(LOWERINGS)


__all__ = ["EXTERN_OPS", "LOWERINGS", "NotLowerable", "lowered_ops", "lowering"]
