"""The inductor stage as the runtime's pipeline sees it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from ember.runtime.ir import Program, VerificationError
from ember.runtime.stages import PreGradPass, Stage


class InductorStage(Stage):
    """core-functional -> compiled: lowering, fusion, C++/Triton codegen, wrapper."""

    name = "inductor"
    consumes = "core-functional"
    produces = "compiled"
    # NOTE: every option compile_program reads, with the types its value may have;
    # ember.frontend.compile rejects other keys. "mode" is not one: the pipeline sets
    # it from compile(mode=...) after checking it (ember.runtime.pipeline.check_mode)
    options: ClassVar[dict[str, tuple[type, ...]]] = {
        "device": (str, torch.device, type(None)),
        "precompile": (bool,),
        "precompile_triton": (bool,),
        "strict": (bool,),
        "eager_random": (bool,),
        "emulate_precision_casts": (bool,),
        "attention_dropout": (bool,),
    }

    def pre_grad_passes(self) -> Sequence[PreGradPass]:
        """The attention rewrite (``passes/attention.py``), run by the aot stage on a
        training program's forward before it derives the backward: SDPA's backward
        then replaces the unfused ops' (the softmax's saved probabilities). Made for the
        compile's options (``attention_dropout``, ``eager_random``: ``attention_pass``)."""
        from ember.inductor.passes.attention import attention_pass, attention_to_sdpa, has_softmax

        return (PreGradPass("attention_to_sdpa", attention_to_sdpa, has_softmax,
                            configure=attention_pass),)

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
