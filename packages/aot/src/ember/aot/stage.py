"""The aot stage as the runtime's pipeline sees it."""

from __future__ import annotations

from typing import Any

from ember.runtime.ir import Program
from ember.runtime.stages import Stage


class AotStage(Stage):
    name = "aot"
    consumes = "aten"
    produces = "core-functional"

    def run(self, program: Program, options: dict[str, Any]) -> Program:
        raise NotImplementedError("the aot stage is not implemented yet")
