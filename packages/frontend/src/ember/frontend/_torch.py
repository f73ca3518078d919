"""The private torch APIs the frontend uses, in one place (DESIGN.md §5): pytree.

Other helpers may add lines here; keep one import per name and say what it is for.
"""

from __future__ import annotations

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
    "register_pytree_node",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_unflatten",
]
