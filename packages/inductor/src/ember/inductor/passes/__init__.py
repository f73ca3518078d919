"""Graph passes run before lowering: named ``Program -> Program`` functions, run in
the order of :data:`PIPELINE`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ember.inductor.passes.attention import attention_pass, attention_to_sdpa
from ember.inductor.passes.constant_folding import constant_folding
from ember.inductor.passes.cse import common_subexpression_elimination
from ember.inductor.passes.dce import dead_code_elimination
from ember.inductor.lowering.layout_plan import plan_layouts
from ember.runtime.ir import Program
from ember.runtime.logs import log, log_enabled

Pass = Callable[[Program], Program]

PIPELINE: list[tuple[str, Pass]] = [
    ("constant_folding", constant_folding),
    ("attention_to_sdpa", attention_to_sdpa),
    ("common_subexpression_elimination", common_subexpression_elimination),
    ("dead_code_elimination", dead_code_elimination),
    ("layout_plan", plan_layouts),  # lowering/layout_plan.py: channels-last conv stacks
]


def pipeline_for(options: Mapping[str, Any]) -> list[tuple[str, Pass]]:
    """:data:`PIPELINE` as a compile with ``options`` runs it: the attention rewrite
    made for them (``attention_dropout``, ``eager_random``)."""
    return [(name, attention_pass(options) if fn is attention_to_sdpa else fn)
            for name, fn in PIPELINE]


def run_passes(program: Program, pipeline: list[tuple[str, Pass]] | None = None) -> Program:
    """Run each pass of ``pipeline`` (default :data:`PIPELINE`) in order."""
    for name, fn in pipeline if pipeline is not None else PIPELINE:
        program = fn(program)
        if log_enabled("graphs"):
            from ember.runtime.ir import print_program

            log("graphs", f"after {name}:\n{print_program(program)}")
    return program


__all__ = ["PIPELINE", "attention_to_sdpa", "common_subexpression_elimination", "constant_folding",
           "dead_code_elimination", "pipeline_for", "run_passes"]
