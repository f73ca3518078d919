"""Idle matmul templates: chosen for an epilogue that did not fuse.

The lowering writes a matmul as a template when work would fuse into it
(``lowering/matmul_template.py``); for its pointwise consumers that is a guess made
before they are lowered. The scheduler may place them elsewhere: HF GPT-2's residual add
joins the next LayerNorm's kernel, and its tanh GELU is longer than an epilogue may be
(``scheduler.EPILOGUE_MAX_WORK``). A template left with nothing fused is only a slower
GEMM than the extern's (cuBLAS adds a bias in its own epilogue), so
:func:`lower_and_schedule` (which ``compile.compile_graph`` runs) makes it the extern
call, logged under ``EMBER_LOGS=autotune`` and counted in the compile profile (``idle
matmul templates``).

In the schedule: the lowering recorded the call the extern's lowering would have
emitted (``MatmulBuffer.extern``, ``lowering/matmul_extern.py``), and the template's
kernel step is replaced by it. That is the program a lowering with these matmuls as
extern calls gives: nothing fused into the template, so no other node was placed
differently for it (a node the template group refused went where it would have gone
without the group), and the call's result is the template's buffer. Two cases differ,
and send the graph to a second lowering and scheduling with these matmuls as extern
calls (``GraphLowering(extern_matmuls=...)``; counted as ``idle matmul template
relowerings``): an extern's lowering that would store more than the template's (an
operand stored transposed, a computed bias: ``MatmulBuffer.extern`` is None), and a
call reading nothing (the random seed's draw) placed before the first template after
the last extern call, whose place an extern call there would have changed
(``KernelGroup.placed_extern``).

A template chosen for work it is sure to fuse (an inlined prologue, the padding of an
unaligned extern) is never idle, nor is one forced by
:func:`~ember.inductor.codegen.triton.matmul_choice.forced_matmul`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from ember.inductor.buffers import ExternCall, MatmulBuffer, ScheduledNode
from ember.inductor.lowering.lowered_graph import LoweredGraph
from ember.inductor.scheduler import KernelStep, Step, schedule
from ember.runtime.logs import log
from ember.runtime.phases import count, phase


def lower_and_schedule(lower: Callable[[frozenset[str]], LoweredGraph]
                       ) -> tuple[LoweredGraph, list[Step]]:
    """``lower(extern_matmuls)`` scheduled, its idle templates (:func:`idle_steps`) as
    extern calls: in the schedule, or (module doc) by lowering and scheduling again."""
    with phase("lowering"):
        lowered = lower(frozenset())
    with phase("scheduling"):
        steps = schedule(lowered)
    idle = idle_steps(steps)
    if not idle:
        return lowered, steps
    count("idle matmul templates", len(idle))
    if all(_replaceable(steps[i]) for i in idle):
        with phase("scheduling"):
            return as_extern_calls(lowered, steps, idle)
    count("idle matmul template relowerings")
    with phase("lowering"):
        lowered = lower(idle_templates(steps))
    with phase("scheduling"):
        steps = schedule(lowered)
    return lowered, steps


def _template_node(step: Step) -> MatmulBuffer | None:
    """The matmul of a template step with nothing fused into it, else None."""
    if not isinstance(step, KernelStep) or step.group.template is None:
        return None
    members = [node for node, _ in step.group.members]
    if len(members) == 1 and isinstance(members[0], MatmulBuffer):
        return members[0]
    return None


def idle_steps(steps: Sequence[Step]) -> list[int]:
    """The positions in ``steps`` of the templates chosen for an epilogue
    (``needs_epilogue``) that run with none fused."""
    return [i for i, step in enumerate(steps)
            if (node := _template_node(step)) is not None and node.needs_epilogue]


def idle_templates(steps: Sequence[Step]) -> frozenset[str]:
    """The graph nodes (``MatmulBuffer.origins``) of the idle templates in ``steps``."""
    found: set[str] = set()
    for i in idle_steps(steps):
        node = _template_node(steps[i])
        assert node is not None
        found.update(node.origins)
    return frozenset(found)


def _replaceable(step: Step) -> bool:
    node = _template_node(step)
    return (node is not None and node.extern is not None and isinstance(step, KernelStep)
            and not step.group.placed_extern)


def as_extern_calls(lowered: LoweredGraph, steps: Sequence[Step], idle: Sequence[int]
                    ) -> tuple[LoweredGraph, list[Step]]:
    """``lowered`` and ``steps`` with the templates at positions ``idle`` (each
    :func:`_replaceable`) as their extern calls, the kernels numbered again in order."""
    calls: dict[int, ExternCall] = {}
    replaced = set(idle)
    buffers = dict(lowered.buffers)
    result: list[Step] = []
    kernels = 0
    for i, step in enumerate(steps):
        if i in replaced:
            node = _template_node(step)
            assert node is not None and node.extern is not None
            calls[id(node)] = node.extern
            buffers[node.name] = dataclasses.replace(buffers[node.name], kind="extern")
            log("autotune", f"matmul {', '.join(node.origins)}: extern (no epilogue fused "
                            f"into its template)")
            result.append(node.extern)
            continue
        if isinstance(step, KernelStep):
            name = f"kernel{kernels}"
            kernels += 1
            if step.kernel.name != name:
                step = KernelStep(dataclasses.replace(step.kernel, name=name), step.group)
        result.append(step)
    nodes: tuple[ScheduledNode, ...] = tuple(calls.get(id(n), n) for n in lowered.nodes)
    return dataclasses.replace(lowered, nodes=nodes, buffers=buffers), result


__all__ = ["as_extern_calls", "idle_steps", "idle_templates", "lower_and_schedule"]
