"""The capture corpus through the aot stage: every case compiled with
``ember.frontend.compile(backend="aot_eager")`` (programs serialized at the stage
boundaries) matches eager within float tolerance: outputs, inputs after the call and
module state (BatchNorm statistics)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from corpus import CASES, CorpusCase
from corpus.compare import assert_case_matches_eager
from ember.runtime.config import patch

TOL = 1e-4


@pytest.fixture(autouse=True)
def _serialize_boundaries() -> Iterator[None]:
    with patch(serialize_boundaries=True):
        yield


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_under_aot_eager(case: CorpusCase) -> None:
    assert_case_matches_eager(case, "aot_eager", TOL)
