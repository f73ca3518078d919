"""A counter of ``aten::copy_`` calls (a test that an in-place path copies nothing)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class CopyCounter(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Within the block, ``count`` is the number of ``aten::copy_`` calls dispatched
    (the runtime's copy back of a mutated input is one)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        if func is torch.ops.aten.copy_.default:
            self.count += 1
        return func(*args, **(kwargs or {}))
