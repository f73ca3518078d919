"""The aot stage as the runtime's pipeline sees it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ember.aot.config import AOT_OPTIONS, AotConfig
from ember.runtime.ir import Program, VerificationError, verify
from ember.runtime.stages import Stage


class AotStage(Stage):
    """``aten`` → ``core-functional``: functionalization, decomposition to Core ATen,
    autograd and min-cut partitioning (:mod:`ember.aot.pipeline`)."""

    name = "aot"
    consumes = "aten"
    produces = "core-functional"
    options = AOT_OPTIONS

    def check_options(self, options: Mapping[str, Any]) -> None:
        """Refuse values the ``aot.*`` options do not accept (:class:`AotConfig`).

        Raises:
            ValueError: naming the option and what it accepts.
        """
        AotConfig.from_options(options)

    def run(self, program: Program, options: dict[str, Any]) -> Program:
        """Compile ``program``; ``options`` may hold ``aot.*`` settings
        (:mod:`ember.aot.config`).

        Raises:
            VerificationError: ``program`` is not ``aten``, or the result is not
                ``core-functional`` (a bug in this stage).
        """
        if program.dialect not in ("aten", "core-functional"):
            raise VerificationError(
                f"the aot stage takes an 'aten' program, got a {program.dialect!r} one")
        # NOTE: imported here, as the inductor stage does: the pipeline loads every stage
        # of a backend before a whole-program cache hit, which needs none of their code.
        from ember.aot.pipeline import aot_compile

        verify(program, "aten")
        result = aot_compile(program, AotConfig.from_options(options))
        verify(result, "core-functional")
        return result
