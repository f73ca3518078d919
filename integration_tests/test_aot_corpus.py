"""The capture corpus through the aot stage: every case compiled with
``ember.frontend.compile(backend="aot_eager")`` (programs serialized at the stage
boundaries) matches eager within float tolerance: outputs, inputs after the call and
module state (BatchNorm statistics)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import ember.frontend
import pytest
import torch
from corpus import CASES, CorpusCase
from ember.frontend.pytree import flatten
from ember.runtime.config import patch

TOL = 1e-4


@pytest.fixture(autouse=True)
def _serialize_boundaries() -> Iterator[None]:
    with patch(serialize_boundaries=True):
        yield


def _clone(tree: Any) -> Any:
    leaves, spec = flatten(tree)
    return spec.unflatten([x.clone() if isinstance(x, torch.Tensor) else x for x in leaves])


def _assert_close(actual: Any, expected: Any, what: str) -> None:
    a_leaves, _ = flatten(actual)
    e_leaves, _ = flatten(expected)
    assert len(a_leaves) == len(e_leaves), what
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if not isinstance(e, torch.Tensor):
            assert a == e, f"{what}[{i}]"
        elif e.is_floating_point():
            torch.testing.assert_close(a, e, atol=TOL, rtol=TOL, msg=f"{what}[{i}]")
        else:
            assert torch.equal(a, e), f"{what}[{i}]"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_under_aot_eager(case: CorpusCase) -> None:
    fn = case.build()
    eager_fn = copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn
    compiled_fn = copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn
    compiled = ember.frontend.compile(compiled_fn, backend="aot_eager")
    args, kwargs = case.inputs()
    eager_args, eager_kwargs = _clone((args, kwargs))
    compiled_args, compiled_kwargs = _clone((args, kwargs))
    if case.random:
        torch.manual_seed(1234)
    expected = eager_fn(*eager_args, **eager_kwargs)
    if case.random:
        torch.manual_seed(1234)
    got = compiled(*compiled_args, **compiled_kwargs)
    _assert_close(got, expected, "output")
    _assert_close((compiled_args, compiled_kwargs), (eager_args, eager_kwargs), "input")
    if isinstance(fn, torch.nn.Module):
        _assert_close(compiled_fn.state_dict(), eager_fn.state_dict(), "state")
