"""The capture corpus through the aot stage: every case compiled with
``ember.frontend.compile(backend="aot_eager")`` (programs serialized at the stage
boundaries) matches eager within float tolerance: outputs, inputs after the call and
module state (BatchNorm statistics)."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import ember.frontend
import pytest
import torch
from corpus import CASES, CorpusCase
from corpus.compare import assert_trees_close, clone_tree
from ember.runtime.config import patch

TOL = 1e-4


@pytest.fixture(autouse=True)
def _serialize_boundaries() -> Iterator[None]:
    with patch(serialize_boundaries=True):
        yield


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_under_aot_eager(case: CorpusCase) -> None:
    fn = case.build()
    eager_fn = copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn
    compiled_fn = copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn
    compiled = ember.frontend.compile(compiled_fn, backend="aot_eager")
    args, kwargs = case.inputs()
    eager_args, eager_kwargs = clone_tree((args, kwargs))
    compiled_args, compiled_kwargs = clone_tree((args, kwargs))
    if case.random:
        torch.manual_seed(1234)
    expected = eager_fn(*eager_args, **eager_kwargs)
    if case.random:
        torch.manual_seed(1234)
    got = compiled(*compiled_args, **compiled_kwargs)
    assert_trees_close(got, expected, "output", TOL)
    assert_trees_close((compiled_args, compiled_kwargs), (eager_args, eager_kwargs), "input", TOL)
    if isinstance(fn, torch.nn.Module):
        assert_trees_close(compiled_fn.state_dict(), eager_fn.state_dict(), "state", TOL)
