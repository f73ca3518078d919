"""A combo kernel's parts run in programs of their own, concurrently
(``codegen/triton/combo.py``): a buffer one part writes must not take the memory of a
buffer another part reads, nor a mutated input another part reads, however the memory
plan would like it (``KernelBackend.concurrent_parts``). Found on the H200: in the op
table's batch (``test_cuda_triton.py``), ``logsumexp(where(x > 0, -inf, x), 0)`` read its
max from a buffer that a ``+ 1`` of another part was writing in place, and came out wrong
(the Triton interpreter runs the parts one after the other, so CPU runs were right)."""

from __future__ import annotations

import pytest
import torch
from ember.inductor.codegen.memory_plan import plan_memory
from ember.inductor.codegen.triton.combo import combo_parts
from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.inductor.loop_ir import Load, Store
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.scheduler import KernelStep, schedule
from helpers import trace
from op_table import table_batch

pytest.importorskip("triton")


def test_no_part_writes_into_memory_another_part_reads() -> None:
    batch, _ = table_batch(torch.float32, True)
    with triton_for_cpu():
        lowered = GraphLowering(trace(batch.fn, batch.inputs)).run()
        steps = schedule(lowered)
        plans, _ = plan_memory(lowered, steps, "cpu")
    combos = 0
    for step, plan in zip(steps, plans):
        if not isinstance(step, KernelStep):
            continue
        parts = combo_parts(step.kernel)
        if parts is None:
            continue
        combos += 1
        owner = {s.buffer: n for n, part in enumerate(parts) for s in part
                 if isinstance(s, (Load, Store))}
        for a in plan.allocations:
            if a.in_place and a.takes is not None and a.takes in owner:
                assert owner[a.takes] == owner[a.name], (step.kernel.name, a)
    assert combos >= 1  # the batch has combo kernels
