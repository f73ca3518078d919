"""The private torch APIs the runtime uses, in one place (docs/architecture.md, "torch and Triton").

A torch upgrade that moves one of these touches only this file. Other modules of
``ember.runtime`` import them from here, never from ``torch._*`` directly. Other helpers
may add lines here; keep one import per name and say what it is for.
"""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree  # flatten/unflatten nested containers
from torch._subclasses.fake_tensor import (  # tensors with metadata and no data
    FakeTensor,
    FakeTensorMode,
    unset_fake_temporarily,
)
from torch.utils._python_dispatch import TorchDispatchMode  # a Python dispatch hook

# The IR layer's own private-API helpers (operator overloads and their schemas); the IR
# cannot import this module, so they live in ember.runtime.ir._torch.
from ember.runtime.ir._torch import OpOverload, is_op_overload, op_schema, overload_name

__all__ = [
    "FakeTensor",
    "assert_async",
    "FakeTensorMode",
    "OpOverload",
    "TorchDispatchMode",
    "is_fake",
    "is_op_overload",
    "op_schema",
    "overload_name",
    "pytree",
    "unset_fake_temporarily",
]


def assert_async(condition: torch.Tensor, message: str) -> None:
    """An assert that runs on ``condition``'s device without synchronizing (CUDA: a
    device-side assert; CPU: checked at once)."""
    torch._assert_async(condition, message)


def is_fake(value: object) -> bool:
    """True for a FakeTensor (of any fake mode)."""
    return isinstance(value, FakeTensor)
