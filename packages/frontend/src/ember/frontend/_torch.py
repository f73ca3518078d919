"""The private torch APIs the frontend uses, in one place (DESIGN.md §5): pytree.

Other helpers may add lines here; keep one import per name and say what it is for.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import (  # nested containers <-> flat leaves
    SUPPORTED_NODES,
    GetAttrKey,
    KeyPath,
    MappingKey,
    SequenceKey,
    TreeSpec,
    register_pytree_node,
    tree_flatten,
    tree_flatten_with_path,
    tree_unflatten,
)

__all__ = [
    "SUPPORTED_NODES",
    "GetAttrKey",
    "KeyPath",
    "MappingKey",
    "SequenceKey",
    "TreeSpec",
    "fake_mode_active",
    "register_pytree_node",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_unflatten",
]


def fake_mode_active() -> bool:
    """Whether a FakeTensorMode is active: some capture is running the code on fake
    tensors (a compiled function called from code being captured runs inline)."""
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None
