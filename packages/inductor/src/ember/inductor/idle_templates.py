"""Idle matmul templates: chosen for an epilogue that did not fuse.

The lowering writes a matmul as a template when work would fuse into it
(``lowering/matmul_template.py``); for its pointwise consumers that is a guess made
before they are lowered. The scheduler may place them elsewhere: HF GPT-2's residual add
joins the next LayerNorm's kernel, and its tanh GELU is longer than an epilogue may be
(``scheduler.EPILOGUE_MAX_WORK``). A template left with nothing fused is only a slower
GEMM than the extern's (cuBLAS adds a bias in its own epilogue), so
:func:`lower_and_schedule` (which ``compile.compile_graph`` runs) lowers such a graph a
second time with these matmuls as extern calls (``GraphLowering(extern_matmuls=...)``),
logged under ``EMBER_LOGS=autotune`` and counted in the compile profile. A template chosen for work it is sure to fuse (an inlined
prologue, the padding of an unaligned extern) is never idle, nor is one forced by
:func:`~ember.inductor.codegen.triton.matmul_choice.forced_matmul`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ember.inductor.buffers import MatmulBuffer
from ember.inductor.lowering.lowered_graph import LoweredGraph
from ember.inductor.scheduler import KernelStep, Step, schedule
from ember.runtime.phases import count, phase


def lower_and_schedule(lower: Callable[[frozenset[str]], LoweredGraph]
                       ) -> tuple[LoweredGraph, list[Step]]:
    """``lower(extern_matmuls)`` scheduled; when the schedule has idle templates
    (:func:`idle_templates`), lowered and scheduled again with them as extern calls."""
    with phase("lowering"):
        lowered = lower(frozenset())
    with phase("scheduling"):
        steps = schedule(lowered)
    idle = idle_templates(steps)
    if idle:
        count("idle matmul templates", len(idle))
        with phase("lowering"):
            lowered = lower(idle)
        with phase("scheduling"):
            steps = schedule(lowered)
    return lowered, steps


def idle_templates(steps: Sequence[Step]) -> frozenset[str]:
    """The graph nodes (``MatmulBuffer.origins``) of the templates in ``steps`` that were
    chosen for an epilogue (``needs_epilogue``) and run with none fused."""
    found: set[str] = set()
    for step in steps:
        if not isinstance(step, KernelStep) or step.group.template is None:
            continue
        members = [node for node, _ in step.group.members]
        if len(members) == 1 and isinstance(members[0], MatmulBuffer) \
                and members[0].needs_epilogue:
            found.update(members[0].origins)
    return frozenset(found)


__all__ = ["idle_templates", "lower_and_schedule"]
