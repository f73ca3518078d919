"""Flattening a call's arguments and results into leaves, and rebuilding them.

Containers are whatever torch's pytree knows (tuples, lists, dicts, namedtuples,
HF ``ModelOutput``) plus dataclasses, which are registered on first sight (their
``init`` fields are the children).
"""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

import torch

from ember.frontend._torch import (
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

__all__ = ["flatten", "flatten_with_names", "holds_size", "sizes_restored", "unflatten"]


def flatten(tree: Any) -> tuple[list[Any], TreeSpec]:
    """``tree`` -> (leaves, spec), registering any dataclass types found on the way."""
    leaves, spec = tree_flatten(tree)
    if any(_is_unregistered_dataclass(leaf) for leaf in leaves):
        for leaf in leaves:
            _register_dataclasses(leaf)
        leaves, spec = tree_flatten(tree)
    return leaves, spec


def unflatten(leaves: list[Any], spec: TreeSpec) -> Any:
    """The inverse of :func:`flatten` (torch's pytree: a ``torch.Size`` comes back a
    plain tuple; :func:`sizes_restored` makes it a ``torch.Size`` again)."""
    return tree_unflatten(leaves, spec)


def holds_size(spec: TreeSpec) -> bool:
    """Whether the tree ``spec`` describes holds a ``torch.Size``."""
    return spec.type is torch.Size or any(holds_size(c) for c in spec.children())


def sizes_restored(tree: Any, spec: TreeSpec) -> Any:
    """``tree`` (``unflatten``'s, of ``spec``) with each ``torch.Size`` of ``spec`` a
    ``torch.Size`` again; the containers around them rebuilt, others left as they are."""
    if spec.type is torch.Size:
        return torch.Size(tree)
    children = spec.children()
    if isinstance(tree, dict):
        out = copy.copy(tree)
        for key, child in zip(spec.context, children):
            out[key] = sizes_restored(tree[key], child)
        return out
    if isinstance(tree, list):
        return [sizes_restored(v, c) for v, c in zip(tree, children)]
    if isinstance(tree, tuple):
        values = [sizes_restored(v, c) for v, c in zip(tree, children)]
        return type(tree)(*values) if hasattr(tree, "_fields") else type(tree)(values)
    return tree


def flatten_with_names(tree: Any, root_names: list[str] | None = None) -> list[str]:
    """A readable, identifier-like name for each leaf of ``tree`` (as :func:`flatten`
    orders them): ``x``, ``batch_input_ids``, ``args_2_0``. ``root_names`` names the
    children of the root (e.g. the parameter names of a function for its ``args``)."""
    flatten(tree)  # registers dataclasses
    paths = [path for path, _ in tree_flatten_with_path(tree)[0]]
    return [_name_of(path, root_names) for path in paths]


def _name_of(path: KeyPath, root_names: list[str] | None) -> str:
    parts: list[str] = []
    for depth, key in enumerate(path):
        if isinstance(key, SequenceKey):
            if depth == 0 and root_names is not None and key.idx < len(root_names):
                parts.append(root_names[key.idx])
            else:
                parts.append(str(key.idx))
        elif isinstance(key, MappingKey):
            parts.append(str(key.key))
        elif isinstance(key, GetAttrKey):
            parts.append(key.name)
        else:
            parts.append(str(key))
    name = re.sub(r"\W+", "_", "_".join(parts)).strip("_") or "input"
    return name if not name[0].isdigit() else f"arg{name}"


def _is_unregistered_dataclass(value: Any) -> bool:
    return (
        dataclasses.is_dataclass(value)
        and not isinstance(value, type)
        and type(value) not in SUPPORTED_NODES
    )


def _register_dataclasses(value: Any) -> None:
    if not _is_unregistered_dataclass(value):
        return
    cls = type(value)
    names = [f.name for f in dataclasses.fields(cls) if f.init]

    def flatten_fn(obj: Any) -> tuple[list[Any], Any]:
        return [getattr(obj, n) for n in names], names

    def unflatten_fn(values: Any, context: Any) -> Any:
        return cls(**dict(zip(context, values)))

    def flatten_with_keys_fn(obj: Any) -> tuple[list[tuple[Any, Any]], Any]:
        return [(GetAttrKey(n), getattr(obj, n)) for n in names], names

    register_pytree_node(cls, flatten_fn, unflatten_fn,
                         flatten_with_keys_fn=flatten_with_keys_fn)
    for n in names:  # nested dataclasses inside this one
        leaves, _ = tree_flatten(getattr(value, n))
        for leaf in leaves:
            _register_dataclasses(leaf)
