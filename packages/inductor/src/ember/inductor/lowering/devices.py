"""Values on another device than the graph's.

A graph's kernels run on one device: the one its tensors were traced on (the first
tensor's device; the ``device`` option may retarget the whole graph, say a program traced
on the CPU compiled for CUDA). A tensor traced on another device than that one
(``torch.zeros(k)`` without a device in a CUDA program makes a CPU tensor; a CPU 0-d
tensor read by a CUDA op) never enters a kernel: its node runs as an extern ATen call
(a counted fallback, with the reason), and an input traced there is checked for there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from ember.runtime.ir import Node, TensorMeta, ValueRef

__all__ = ["copy_on_own_device", "node_metas", "other_device", "traced_device"]


def traced_device(metas: list[Any]) -> torch.device | None:
    """The device of the first tensor among ``metas`` (a graph's values in order; a
    multi-output node's tuple counts its tensors), or None."""
    for m in metas:
        for one in m if isinstance(m, tuple) else (m,):
            if isinstance(one, TensorMeta):
                return one.device
    return None


def node_metas(nodes: Mapping[str, Node], node: Node) -> list[Any]:
    """The metadata of every value ``node`` makes and reads (tensors and others);
    ``nodes``: the graph's nodes by name."""
    metas: list[Any] = list(node.meta) if isinstance(node.meta, tuple) else [node.meta]
    for a in node.inputs():
        meta = nodes[a.node].meta
        metas.append(meta[a.index] if isinstance(meta, tuple) and a.index is not None
                     else meta)
    return metas


def other_device(nodes: Mapping[str, Node], node: Node,
                 traced: torch.device | None) -> str | None:
    """The device type of a tensor ``node`` makes or reads that is not ``traced``'s, or
    None (``nodes``: the graph's nodes by name)."""
    if traced is None:
        return None
    for m in node_metas(nodes, node):
        if isinstance(m, TensorMeta) and m.device.type != traced.type:
            return m.device.type
    return None


def copy_on_own_device(low: Any, ref: ValueRef, meta: Any) -> Any:
    """For a graph output that is an input or constant on another device than ``low``'s
    graph (a cpu step counter a cuda optimizer step returns): an extern ``clone`` of it,
    which stays on that device; None for an output on the graph's device (its copy is a
    kernel's). A kernel would make the copy on the graph's device."""
    if not isinstance(meta, TensorMeta) or meta.device.type == low.device.type:
        return None
    node = Node(f"{ref.node}_copy", "call", "aten::clone.default", args=(ref,), meta=meta)
    return low.extern(node, fallback=True,
                      reason=f"a {meta.device.type} output of a {low.device.type} graph")

