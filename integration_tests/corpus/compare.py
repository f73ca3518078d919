"""Helpers the corpus tests share: cloning pytree inputs, comparing pytree results, and
running one corpus case compiled against eager."""

from __future__ import annotations

import copy
from typing import Any

import ember.frontend
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


def assert_case_matches_eager(case: Any, backend: str, tol: float,
                              options: dict[str, Any] | None = None) -> None:
    """``case`` (a :class:`corpus.CorpusCase`) compiled with ``backend`` matches eager:
    outputs, inputs after the call and, for a module, its state (BatchNorm statistics).
    Each side gets its own copy of the module and of the inputs; random cases run from
    the same seed (under ``inductor`` with its ``eager_random`` option: its own kernels
    draw other values than torch's generator, see test_inductor_random.py)."""
    if case.random and backend == "inductor":
        options = {**(options or {}), "eager_random": True}
    fn = case.build()
    eager_fn = copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn
    compiled_fn = copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn
    compiled = ember.frontend.compile(compiled_fn, backend=backend, options=options)
    args, kwargs = case.inputs()
    eager_args, eager_kwargs = clone_tree((args, kwargs))
    compiled_args, compiled_kwargs = clone_tree((args, kwargs))
    if case.random:
        torch.manual_seed(1234)
    expected = eager_fn(*eager_args, **eager_kwargs)
    if case.random:
        torch.manual_seed(1234)
    got = compiled(*compiled_args, **compiled_kwargs)
    assert_trees_close(got, expected, "output", tol)
    assert_trees_close((compiled_args, compiled_kwargs), (eager_args, eager_kwargs), "input", tol)
    if isinstance(fn, torch.nn.Module):
        assert_trees_close(compiled_fn.state_dict(), eager_fn.state_dict(), "state", tol)
