"""Arguments whose tensors Ember's graphs do not take: a tensor of a layout other than
strided (sparse, mkldnn, jagged; such a call runs eagerly), or a fake tensor (a call made
by a capture tracing its caller: it runs inline there)."""

from __future__ import annotations

from typing import Any

import torch
from ember.frontend._torch import is_fake

__all__ = ["unsupported_layout"]


def unsupported_layout(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The layout of the first argument tensor that is not strided (sparse, mkldnn,
    jagged), looking one container deep; ``"fake"`` for a fake tensor (a tensor guard
    tests the exact type: a FakeTensor never passes one); None when there is none."""
    for value in (*args, *kwargs.values()):
        items = (value.values() if isinstance(value, dict)
                 else value if isinstance(value, (list, tuple)) else (value,))
        for item in items:
            if isinstance(item, torch.Tensor) and item.layout is not torch.strided:
                return item.layout
            if isinstance(item, torch.Tensor) and is_fake(item):
                return "fake"
    return None
