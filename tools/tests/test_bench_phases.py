"""The bench's cold-compile phases: what the cold worker reports of Ember's stage profile
and the table the bench prints."""

from __future__ import annotations

import collections

import pytest
from benchlib import coldstart, report, runner
from ember.runtime import phases
from ember.runtime.phases import compile_profile, count, phase, set_count


def test_the_cold_worker_sums_the_profiles_of_every_compile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(phases, "_history", collections.deque(maxlen=phases.KEPT_PROFILES))
    before = coldstart._ember_phases()
    assert before == {}
    for _ in range(2):
        with compile_profile():
            with phase("inductor"), phase("kernel builds"):
                count("cpp builds")
            set_count("build threads", 4)
    after = coldstart._ember_phases()
    assert after["#cpp builds"] == before.get("#cpp builds", 0) + 2
    assert after["#build threads"] == 4  # a pool size, not a sum
    assert after["inductor/kernel builds"] > before.get("inductor/kernel builds", 0.0)
    assert after["total"] >= after["inductor"]


def test_the_phases_table_has_one_line_per_ember_row() -> None:
    row = runner.Row("mlp", "float32", "ember", cold_phases={
        "total": 3.0, "capture": 0.5, "aot": 0.5, "inductor": 1.75,
        "inductor/kernel builds": 1.5, "runtime load": 0.25,
        "#cpp builds": 2, "#build threads": 2})
    torch_row = runner.Row("mlp", "float32", "torch")
    assert report.phases_table([torch_row]) == ""
    header, line = report.phases_table([torch_row, row]).splitlines()
    assert header.split() == ["model", "total", "capture", "cache", "aot", "inductor",
                              "lowering", "schedule", "codegen", "builds", "load", "counts"]
    assert line == ("  mlp                     3.00      0.50      0.00      0.50      1.75"
                    "      0.00      0.00      0.00      1.50      0.25"
                    "  cpp builds 2, build threads 2")
