"""Helpers the corpus tests share: cloning pytree inputs and comparing pytree results."""

from __future__ import annotations

from typing import Any

import torch
from ember.frontend.pytree import flatten


def clone_tree(tree: Any) -> Any:
    """A copy of ``tree`` whose tensors are cloned (so mutations stay visible per run)."""
    leaves, spec = flatten(tree)
    return spec.unflatten([x.clone() if isinstance(x, torch.Tensor) else x for x in leaves])


def assert_trees_close(actual: Any, expected: Any, what: str, tol: float) -> None:
    """Leaf by leaf: floating tensors within ``tol`` (atol = rtol), others exactly equal."""
    a_leaves, _ = flatten(actual)
    e_leaves, _ = flatten(expected)
    assert len(a_leaves) == len(e_leaves), what
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if not isinstance(e, torch.Tensor):
            assert a == e, f"{what}[{i}]"
        elif e.is_floating_point():
            torch.testing.assert_close(a, e, atol=tol, rtol=tol, msg=f"{what}[{i}]")
        else:
            assert torch.equal(a, e), f"{what}[{i}]"
