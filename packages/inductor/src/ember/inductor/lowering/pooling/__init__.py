"""Lowering rules for pooling over 2 and 3 spatial dims: max pooling with indices,
average pooling, adaptive average pooling, and their backward ops.

The forward ops are element functions over the output with the window unrolled (at most
:data:`~.window.MAX_WINDOW` loads, masked at the padding), so they fuse with their
producer and consumers like any pointwise op. The backward ops are scatters (see
:meth:`~ember.inductor.lowering.graph_lowering.GraphLowering.scatter`): each output
gradient is added into the input position(s) it came from: the recorded argmax for max
pooling, every position of its window for average pooling.

- :mod:`.window`: the window's geometry over N spatial dims and its masked loads
- :mod:`.max_pool`, :mod:`.avg_pool`, :mod:`.adaptive_avg_pool`: the rules
"""

from ember.inductor.lowering.pooling import adaptive_avg_pool, avg_pool, max_pool  # noqa: F401
from ember.inductor.lowering.pooling.adaptive_avg_pool import adaptive_span
from ember.inductor.lowering.pooling.window import MAX_REREAD_OPS, MAX_WINDOW, Window

__all__ = ["MAX_REREAD_OPS", "MAX_WINDOW", "Window", "adaptive_span"]
