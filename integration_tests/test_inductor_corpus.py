"""The capture corpus and the aot mutation corpus under ``backend="inductor"`` with
``options={"strict": True}`` (an Ember bug raises instead of falling back to eager):
outputs, inputs after the call and module state match eager within float tolerance."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ember.frontend
import pytest
import torch
from corpus import CASES, CorpusCase
from corpus.compare import assert_case_matches_eager, assert_trees_close

TOL = 1e-4
STRICT = {"strict": True}


def _mutation_corpus() -> list[tuple[str, Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]]:
    """The cases of ``packages/aot/tests/test_mutation_corpus.py`` (one list, one home)."""
    tests = str(Path(__file__).resolve().parent.parent / "packages" / "aot" / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    module = importlib.import_module("test_mutation_corpus")
    return list(module.CORPUS)


MUTATION_CASES = _mutation_corpus()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_case_under_inductor(case: CorpusCase) -> None:
    assert_case_matches_eager(case, "inductor", TOL, STRICT)


@pytest.mark.parametrize("name,fn,make_inputs", MUTATION_CASES,
                         ids=[c[0] for c in MUTATION_CASES])
def test_mutation_case_under_inductor(name: str, fn: Callable[..., Any],
                                      make_inputs: Callable[[], tuple[torch.Tensor, ...]]) -> None:
    compiled = ember.frontend.compile(fn, backend="inductor", options=STRICT)
    for _ in range(2):  # the second call reuses the compiled program on fresh inputs
        inputs = make_inputs()
        eager_inputs = [t.clone() for t in inputs]
        compiled_inputs = [t.clone() for t in inputs]
        expected = fn(*eager_inputs)
        got = compiled(*compiled_inputs)
        assert_trees_close(got, expected, f"{name} output", TOL)
        assert_trees_close(compiled_inputs, eager_inputs, f"{name} inputs", TOL)
