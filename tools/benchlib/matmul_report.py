"""The matmul suite's report: one table of every (workload, variant) with speeds against
the other variants, the issue #16 targets each Ember variant meets or misses, and the
JSON and Markdown files.

A speed ``vs X`` is X's time divided by the row's time (above 1: the row is faster than
X), so Ember's rows read as the issue's figures: ``vs eager`` (cuBLAS and eager
epilogues), ``vs torch``, ``vs torch-max-autotune``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib.matmul import family
from benchlib.matmul_runner import EMBER_VARIANTS, NOT_IMPLEMENTED, MatmulRow
from benchlib.report import format_time as _time
from benchlib.report import json_safe

NOT_IMPLEMENTED_CELL = "n/a (mode not implemented)"

SPEED_BASELINES = ("eager", "torch", "torch-max-autotune")
"""The variants every row's speed is given against (the issue's baselines)."""



def columns(rows: Sequence[MatmulRow]) -> tuple[str, ...]:
    """The table's columns: a ``vs X`` column for each baseline X that ``rows`` have."""
    return ("workload", "dtype", "compiler", "time", "TFLOP/s",
            *(f"vs {b}" for b in baselines(rows)), "compile", "warm autotune", "accuracy",
            "kernels")


def baselines(rows: Sequence[MatmulRow]) -> tuple[str, ...]:
    """The :data:`SPEED_BASELINES` among ``rows``' variants."""
    present = {r.variant for r in rows}
    return tuple(b for b in SPEED_BASELINES if b in present)


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:{spec}}{suffix}"


def _times(rows: Sequence[MatmulRow]) -> dict[tuple[str, str, str], float]:
    """(workload, dtype, variant) -> median ms, for the rows that were timed."""
    return {(r.workload, r.dtype, r.variant): r.time_ms for r in rows if r.time_ms}


def speed(rows: Sequence[MatmulRow], row: MatmulRow, baseline: str) -> float | None:
    """``baseline``'s time over ``row``'s time on the same workload and dtype (``None``
    when either was not timed, or ``row`` is the baseline)."""
    theirs = _times(rows).get((row.workload, row.dtype, baseline))
    if row.variant == baseline or not theirs or not row.time_ms:
        return None
    return theirs / row.time_ms


def _cells(rows: Sequence[MatmulRow]) -> tuple[list[list[str]], list[str]]:
    """Table cells, one list per row (workload and dtype only on a workload's first row),
    and the notes under the table (failures, accuracy details, warnings)."""
    lines: list[list[str]] = []
    notes: list[str] = []
    width = len(columns(rows))
    previous: tuple[str, str] | None = None
    for row in rows:
        first = (row.workload, row.dtype) != previous
        previous = (row.workload, row.dtype)
        head = [row.workload, row.dtype] if first else ["", ""]
        who = f"{row.workload} {row.dtype} / {row.variant}"
        if row.status == NOT_IMPLEMENTED:
            lines.append(head + [row.variant, NOT_IMPLEMENTED_CELL] + [""] * (width - 4))
            continue
        if row.status == "fail_to_run":
            lines.append(head + [row.variant, "FAILED"] + [""] * (width - 4))
            notes.append(f"{who}: {row.error}")
            continue
        speeds = [_fmt(speed(rows, row, b), ".2f", "x") for b in baselines(rows)]
        lines.append(head + [
            row.variant, _time(row.time_ms), _fmt(row.tflops, ".2f"), *speeds,
            _fmt(row.compile_s, ".1f", "s"), _fmt(row.warm_autotune_s, ".1f", "s"),
            row.accuracy or "-", _fmt(row.kernels, "d"),
        ])
        notes += [f"{who}: {extra}" for extra in (row.accuracy_detail, row.error) if extra]
    return lines, notes


def _text(columns: Sequence[str], lines: list[list[str]]) -> list[str]:
    widths = [max([len(c)] + [len(line[i]) for line in lines]) for i, c in enumerate(columns)]
    out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip(),
           "  ".join("-" * w for w in widths)]
    return out + ["  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip()
                  for line in lines]


def _markdown(columns: Sequence[str], lines: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            + ["| " + " | ".join(line) + " |" for line in lines])


def table(rows: Sequence[MatmulRow], markdown: bool = False) -> str:
    """Every row as a text (or Markdown) table, the notes below it."""
    lines, notes = _cells(rows)
    out = _markdown(columns(rows), lines) if markdown else _text(columns(rows), lines)
    if notes:
        out += [""] + ([] if markdown else ["notes:"])
        out += [("- " if markdown else "  ") + n for n in notes]
    return "\n".join(out)


@dataclass(frozen=True)
class TargetResult:
    """One issue #16 target checked on one workload for one Ember variant: ``speed`` is
    the baseline's time over Ember's (``None``: not measured; ``verdict`` says why)."""

    workload: str
    dtype: str
    ember: str
    target: str
    baseline: str
    speed: float | None
    verdict: str


def targets(rows: Sequence[MatmulRow]) -> list[TargetResult]:
    """Every target of every workload's family, for each Ember variant in ``rows``
    (targets against a baseline that is not in ``rows`` are left out)."""
    results: list[TargetResult] = []
    run = {(r.workload, r.dtype, r.variant) for r in rows}
    for row in rows:
        if row.variant not in EMBER_VARIANTS:
            continue
        for target in family(row.family).targets:
            if (row.workload, row.dtype, target.baseline) not in run:
                continue
            value = speed(rows, row, target.baseline)
            if row.status == NOT_IMPLEMENTED:
                verdict = NOT_IMPLEMENTED_CELL
            elif value is None:
                failed = row.variant if row.time_ms is None else target.baseline
                verdict = f"not measured ({failed} FAILED)"
            elif row.status == "fail_accuracy":
                verdict = "NOT met (wrong result)"
            else:
                verdict = "met" if target.met(value) else "NOT met"
            results.append(TargetResult(row.workload, row.dtype, row.variant, target.text,
                                        target.baseline, value, verdict))
    return results


TARGET_COLUMNS = ("workload", "dtype", "ember", "target", "speed", "verdict")


def _target_cells(results: Sequence[TargetResult]) -> list[list[str]]:
    return [[r.workload, r.dtype, r.ember, r.target, _fmt(r.speed, ".2f", "x"), r.verdict]
            for r in results]


def target_summary(results: Sequence[TargetResult]) -> str:
    """``N of M targets met (K not measured)``."""
    met = sum(r.verdict == "met" for r in results)
    unmeasured = sum(r.speed is None for r in results)
    return f"{met} of {len(results)} targets met ({unmeasured} not measured)"


def target_table(results: Sequence[TargetResult], markdown: bool = False) -> str:
    """The targets as a text (or Markdown) table with the summary line below."""
    if not results:
        return "no target measured: the run has no Ember variant beside a target's baseline"
    cells = _target_cells(results)
    out = _markdown(TARGET_COLUMNS, cells) if markdown else _text(TARGET_COLUMNS, cells)
    return "\n".join(out + ["", target_summary(results)])


LEGEND = ("vs X: X's time / this row's time (above 1: faster than X); compile: first call "
          "in this process (compilation + one run, with caches of its own that start empty); "
          "warm autotune: first call in a fresh process given that compile's autotune cache "
          "and empty compiled-code caches (autotuning variants only)")


def write_json(path: str | Path, meta: dict[str, Any], rows: Sequence[MatmulRow]) -> None:
    """Write ``{"meta", "rows", "targets"}`` (non-finite floats as strings: strict JSON)."""
    payload = {"meta": meta, "rows": [dataclasses.asdict(r) for r in rows],
               "targets": [dataclasses.asdict(t) for t in targets(rows)]}
    Path(path).write_text(json.dumps(json_safe(payload), indent=2) + "\n")


def write_markdown(path: str | Path, meta: dict[str, Any], rows: Sequence[MatmulRow]) -> None:
    """Write the run as a Markdown section: command, environment, table, targets."""
    env = ", ".join(f"{k} {meta[k]}" for k in ("python", "torch", "triton") if k in meta)
    lines = [
        f"Command: `{meta.get('command', '')}`",
        "",
        (f"Date: {meta.get('date', '?')}; {env}; device: {meta.get('device', '?')}; "
        f"scale {meta.get('scale')}; workloads {meta.get('workloads_done', '?')}; "
        f"run time {meta.get('wall_s', '?')} s."),
        "",
        table(rows, markdown=True),
        "",
        LEGEND + ".",
        "",
        "Issue #16 targets:",
        "",
        target_table(targets(rows), markdown=True),
    ]
    Path(path).write_text("\n".join(lines) + "\n")
