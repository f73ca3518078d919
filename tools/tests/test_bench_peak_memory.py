"""The bench's ``peak MiB`` column (issue #19 item 5): every compiler's peak on CUDA,
measured alone after the timed calls, in the table, the Markdown and the JSON; ``n/a`` on
the CPU (not measured, not zero)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from benchlib import report, runner, timing

CPU = torch.device("cpu")


def _rows(device: torch.device, train: bool, compilers: list[str]) -> list[runner.Row]:
    config = runner.BenchConfig(device, torch.float32, "test", train=train, cold=False)
    rows: list[runner.Row] = runner.bench_model("mlp", config, compilers)
    return rows


def _peak_cells(rows: list[runner.Row]) -> list[str]:
    lines = report.table(rows).splitlines()
    assert lines[0].split()[-2:] == ["peak", "MiB"]
    return [line.split()[-1] for line in lines[2:]]


@pytest.mark.parametrize("train", [False, True])
def test_cpu_rows_say_not_measured(train: bool, tmp_path: Path) -> None:
    rows = _rows(CPU, train, ["eager", "ember"])
    assert [r.status for r in rows] == ["ok", "ok"]
    assert [r.peak_memory_mb for r in rows] == [None, None]
    assert _peak_cells(rows) == ["n/a", "n/a"]
    out = tmp_path / "run.json"
    report.write_json(out, {"device": "cpu"}, rows, {})
    assert [r["peak_memory_mb"] for r in json.loads(out.read_text())["rows"]] == [None, None]
    md = tmp_path / "run.md"
    report.write_markdown(md, {"device": "cpu"}, rows, {})
    assert "| fallbacks | peak MiB |" in md.read_text()


def test_each_compiler_is_measured_on_its_own_step(monkeypatch: pytest.MonkeyPatch) -> None:
    # the plumbing a CUDA run takes: one measurement per compiler, of that compiler's step
    measured: list[Any] = []

    def fake_peak(fn: Any, device: torch.device) -> float:
        measured.append(fn)
        return 1000.0 + 234.4 * len(measured)

    monkeypatch.setattr(timing, "peak_memory_mb", fake_peak)
    rows = _rows(CPU, True, ["eager", "ember"])
    assert len(measured) == 2 and measured[0] is not measured[1]
    assert [r.peak_memory_mb for r in rows] == [pytest.approx(1234.4), pytest.approx(1468.8)]
    assert _peak_cells(rows) == ["1,234", "1,469"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("train", [False, True])
def test_cuda_rows_report_every_compilers_peak(train: bool) -> None:
    rows = _rows(torch.device("cuda"), train, ["eager", "torch", "ember"])
    assert [r.status for r in rows] == ["ok", "ok", "ok"], [r.error for r in rows]
    for row in rows:
        assert row.peak_memory_mb is not None and row.peak_memory_mb > 0, row
    assert all(cell != "n/a" for cell in _peak_cells(rows))
