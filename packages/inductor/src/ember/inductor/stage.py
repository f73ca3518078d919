"""The inductor stage as the runtime's pipeline sees it."""

from __future__ import annotations

from typing import Any

from ember.runtime.ir import Program
from ember.runtime.stages import Stage


class InductorStage(Stage):
    name = "inductor"
    consumes = "core-functional"
    produces = "compiled"

    def run(self, program: Program, options: dict[str, Any]) -> Program:
        raise NotImplementedError("the inductor stage is not implemented yet")
