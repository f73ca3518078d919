"""The inductor stage as the runtime's pipeline sees it."""

from __future__ import annotations

from typing import Any

from ember.runtime.ir import Program, VerificationError
from ember.runtime.stages import Stage


class InductorStage(Stage):
    """core-functional -> compiled: lowering, fusion, C++/Triton codegen, wrapper."""

    name = "inductor"
    consumes = "core-functional"
    produces = "compiled"

    def run(self, program: Program, options: dict[str, Any]) -> Program:
        """Compile ``program`` (see :func:`ember.inductor.compile.compile_program`).

        Raises:
            VerificationError: if ``program`` is not in the core-functional dialect.
        """
        if program.dialect != self.consumes:
            raise VerificationError(
                f"the inductor stage consumes {self.consumes!r} programs, got "
                f"{program.dialect!r} (run the aot stage first)")
        from ember.inductor.compile import compile_program

        return compile_program(program, options)
