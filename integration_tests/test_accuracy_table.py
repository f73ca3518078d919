"""Ember's accuracy on the model zoo matches integration_tests/expected_accuracy.csv.

Each (model, backend) row is re-observed: compile the zoo model (test size, CPU, float32)
with Ember and compare against an fp64 reference (docs/architecture.md). A difference in EITHER
direction fails, so improvements get recorded too; the message names the row to change,
and ``python tools/update_accuracy.py`` rewrites the table.
"""

from __future__ import annotations

import pytest
from benchlib import accuracy_table

TABLE = accuracy_table.read()


def test_table_covers_every_model_and_backend() -> None:
    missing = [k for k in accuracy_table.expected_keys() if k not in TABLE]
    stale = [k for k in TABLE if k not in set(accuracy_table.expected_keys())]
    assert not missing and not stale, (
        f"expected_accuracy.csv is out of date: missing rows {missing}, rows for unknown "
        f"models/backends {stale}; run `{accuracy_table.UPDATE_COMMAND}`"
    )


@pytest.mark.parametrize(
    "model,backend", accuracy_table.expected_keys(), ids=lambda v: str(v)
)
def test_accuracy_matches_table(model: str, backend: str) -> None:
    observed = accuracy_table.observe(model, backend)
    expected = TABLE.get((model, backend))
    assert expected is not None and expected.same_as(observed), (
        accuracy_table.mismatch_message(expected, observed)
    )
