"""A stand-in aot stage for the program-cache tests: passes programs through unchanged
and counts its runs (a cache hit runs no stage)."""

from __future__ import annotations

from typing import Any

import pytest
from ember.runtime import pipeline as pipeline_module
from ember.runtime.ir import Program
from ember.runtime.stages import Stage


class CountingStage(Stage):
    """aten -> core-functional, unchanged; counts its runs."""

    name = "aot"
    consumes = "aten"
    produces = "core-functional"
    options = None

    def __init__(self) -> None:
        self.runs = 0

    def run(self, program: Program, options: dict[str, Any]) -> Program:
        self.runs += 1
        out = program.copy()
        out.dialect = self.produces
        return out


def install_counting_stage(monkeypatch: pytest.MonkeyPatch) -> CountingStage:
    """Every stage the pipeline loads is one new :class:`CountingStage`."""
    counting = CountingStage()
    monkeypatch.setattr(pipeline_module, "load_stage", lambda name: counting)
    return counting
