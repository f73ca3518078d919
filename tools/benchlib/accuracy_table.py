"""The expected-accuracy table: what Ember does on each zoo model, per backend.

``integration_tests/expected_accuracy.csv`` has one row per (model, backend):
``result`` in {pass, fail_accuracy, fail_to_run} and ``graph_breaks`` (empty when the
compiled callable does not report it). ``integration_tests/test_accuracy_table.py``
fails when what Ember does today differs from the table in either direction, and
``python tools/update_accuracy.py`` rewrites the table from what it observes.

Models run at the zoo's ``test`` size on CPU, inference, float32.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import torch
import zoo

from benchlib import accuracy, compilers
from benchlib.runner import describe

CSV_PATH = Path(__file__).resolve().parents[2] / "integration_tests" / "expected_accuracy.csv"
FIELDS = ("model", "backend", "result", "graph_breaks")
RESULTS = ("pass", "fail_accuracy", "fail_to_run")
SUITE = "test"
UPDATE_COMMAND = "python tools/update_accuracy.py"


@dataclass(frozen=True)
class Outcome:
    """One table row; ``detail`` (not stored) says why it failed."""

    model: str
    backend: str
    result: str
    graph_breaks: str = ""
    detail: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.model, self.backend)

    def same_as(self, other: Outcome) -> bool:
        return (self.result, self.graph_breaks) == (other.result, other.graph_breaks)


def observe(model: str, backend: str, device: str = "cpu") -> Outcome:
    """Compile zoo model ``model`` (test size, float32) with Ember's ``backend`` and judge
    it against the fp64 reference. Never raises: a failure is a ``fail_to_run`` outcome."""
    try:
        module, inputs = zoo.get(model).make(torch.device(device), torch.float32, SUITE)
        reference = accuracy.compute_reference(module, inputs, train=False)
        compiled = compilers.compile_fn("ember", module, backend)
        observed = accuracy.observe(compiled, module, inputs, train=False)
    except Exception as exc:  # noqa: BLE001 - a failure is a result, recorded in the row
        return Outcome(model, backend, "fail_to_run", detail=describe(exc))
    breaks = compilers.graph_stats("ember", compiled).graph_breaks
    result = accuracy.judge(reference, observed)
    return Outcome(model, backend, result.label, "" if breaks is None else str(breaks),
                   result.reason)


def expected_keys() -> list[tuple[str, str]]:
    """Every (model, backend) the table must have: all test-suite models x all backends."""
    return [(m, b) for m in zoo.names(SUITE) for b in compilers.EMBER_BACKENDS]


def read(path: Path = CSV_PATH) -> dict[tuple[str, str], Outcome]:
    """The table, keyed by (model, backend).

    Raises:
        ValueError: a row with an unknown result or a duplicated key.
    """
    table: dict[tuple[str, str], Outcome] = {}
    with open(path, newline="") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            outcome = Outcome(row["model"], row["backend"], row["result"], row["graph_breaks"])
            if outcome.result not in RESULTS:
                raise ValueError(f"{path}:{line}: result {outcome.result!r} not in {RESULTS}")
            if outcome.key in table:
                raise ValueError(f"{path}:{line}: duplicate row for {outcome.key}")
            table[outcome.key] = outcome
    return table


def write(outcomes: list[Outcome], path: Path = CSV_PATH) -> None:
    """Write the table, in the zoo's model order, then backend order."""
    models = {m: i for i, m in enumerate(zoo.names())}
    backends = {b: i for i, b in enumerate(compilers.EMBER_BACKENDS)}
    rows = sorted(outcomes, key=lambda o: (models.get(o.model, len(models)), o.model,
                                           backends.get(o.backend, len(backends))))
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(FIELDS)
        for o in rows:
            writer.writerow([o.model, o.backend, o.result, o.graph_breaks])


def mismatch_message(expected: Outcome | None, observed: Outcome, path: Path = CSV_PATH) -> str:
    """Why the test failed and which row to update."""
    seen = f"result={observed.result} graph_breaks={observed.graph_breaks or '-'}"
    why = f" ({observed.detail})" if observed.detail else ""
    if expected is None:
        return (f"{observed.model}/{observed.backend}: no row in {path.name}; observed {seen}"
                f"{why}. Run `{UPDATE_COMMAND}` to add it.")
    direction = "improved" if _rank(observed) > _rank(expected) else "regressed"
    if _rank(observed) == _rank(expected):
        direction = "changed graph breaks"
    return (
        f"{observed.model}/{observed.backend} {direction}: {path.name} says "
        f"result={expected.result} graph_breaks={expected.graph_breaks or '-'}, observed {seen}"
        f"{why}. If this is intended, update the row "
        f"'{observed.model},{observed.backend},{observed.result},{observed.graph_breaks}' "
        f"(or run `{UPDATE_COMMAND}`)."
    )


def _rank(o: Outcome) -> int:
    return {"fail_to_run": 0, "fail_accuracy": 1, "pass": 2}[o.result]
