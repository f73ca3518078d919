"""Variants of Ember's CPU code measured against each other and torch.compile, in one
process: training steps of quick-suite zoo models, timed round-robin.

    OMP_NUM_THREADS=1 python tools/ab_cpu.py gpt,hf_bert,resnet [ROUNDS] [VARIANTS]

Variants (comma-separated, default all): ``ember`` as it is; ``ember_no_absorb``: no
reduction taking in the pointwise kernel it reads (``inductor/absorb.py``);
``ember_absorb_all``: column reductions taking it in too (``CppBackend.can_absorb``);
``ember_recompute_conv_inputs``: the partitioner free to recompute the values a backward
convolution or matmul reads (``aot.save_conv_inputs`` off); ``ember_literal_cse_off``: the loop-IR
builder keying float literals by their written value and commutative ops by operand order
(before session 43); ``ember_cat_recomputed``: a concatenation a matmul reads recomputed
by its other consumers, not read from the matmul's stored operand (before session 43);
``ember_no_tie_break``: the min cut choosing arbitrarily between cuts of equal bytes
(before session 43); ``ember_reduction_out_of_place``: no one-pass reduction storing in
place of an input it reads for the last time (before session 44);
``ember_cat_unsplit``: a concatenation's innermost loop not split at its pieces' edges
(before session 44); ``ember_views_as_strided``: every wrapper view made by
``Tensor.as_strided``, none by ``_read_view`` (``codegen/wrapper.READ_VIEWS`` off: before
session 45). Each model's steps (the bench's forward, backward and SGD step) are
compiled and warmed up three times, then timed one after another ``ROUNDS`` times
(default 40), the order rotated each round (the first step of a round runs slower). The
variant compiled first runs 1-4% slower than one compiled after it, even with the same
code (``ember_again``: Ember compiled a second time), so each model is measured twice,
the variants (then torch.compile's step) compiled in the given order and then in
reverse; the report gives each variant's mean of the two medians in milliseconds, then the two.
``torch.set_num_threads`` follows ``OMP_NUM_THREADS`` (default 1).
"""

from __future__ import annotations

import contextlib
import copy
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import zoo
from benchlib.aot_variants import aot_config
from benchlib.runner import make_step
from ember.aot.partition import mincut
from ember.inductor.codegen import memory_plan, wrapper
from ember.inductor.codegen.cpp import kernel as cpp_kernel
from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.lowering import builder, inlining
from ember.runtime.config import patch

@contextlib.contextmanager
def _literal_cse_off() -> Any:
    """The loop-IR builder before session 43: float literals keyed by their written value,
    commutative ops by their operands' order."""
    with mock.patch.object(builder, "COMMUTATIVE_OPS", frozenset()), \
            mock.patch.object(builder, "_as_dtype", lambda value, dtype: value):
        yield


VARIANTS: dict[str, Callable[[], contextlib.AbstractContextManager[Any]]] = {
    "ember": contextlib.nullcontext,
    "ember_no_absorb": lambda: mock.patch.object(CppBackend, "can_absorb",
                                                 lambda self, fused: False),
    # taking in everywhere, column reductions too
    "ember_absorb_all": lambda: mock.patch.object(CppBackend, "can_absorb",
                                                  lambda self, fused: True),
    # the min cut free to recompute what a backward convolution or matmul reads
    "ember_recompute_conv_inputs": lambda: aot_config(save_conv_inputs=False),
    "ember_literal_cse_off": _literal_cse_off,
    # a concatenation a matmul reads recomputed by its other consumers (before session 43)
    "ember_cat_recomputed": lambda: mock.patch.object(
        inlining.Uses, "stored_anyway", lambda self, name: False),
    # the min cut without its tie-break (a recomputed pointwise op costing one byte)
    "ember_no_tie_break": lambda: mock.patch.object(mincut, "RECOMPUTE_TIE_BREAK", 0),
    # a one-pass reduction's stores never in place of its inputs (before session 44)
    "ember_reduction_out_of_place": lambda: mock.patch.object(
        memory_plan, "_one_pass", lambda kernel: False),
    # a concatenation's innermost loop not split at its pieces' edges (before session 44)
    "ember_cat_unsplit": lambda: mock.patch.object(cpp_kernel, "interval_splits",
                                                   lambda kernel: None),
    # every wrapper view an autograd view through as_strided (before session 45)
    "ember_views_as_strided": lambda: mock.patch.object(wrapper, "READ_VIEWS", False),
    # Ember as it is, compiled a second time: the harness's own bias between two places
    "ember_again": contextlib.nullcontext,
}


def _medians(name: str, chosen: list[str], rounds: int) -> dict[str, float]:
    """Each variant's median step, in seconds (``"torch"``: torch.compile's): compiled
    in ``chosen``'s order, then timed round-robin."""
    model, inputs = zoo.get(name).make("cpu", torch.float32, "quick")
    steps = {}
    for label in chosen:
        if label == "torch":
            step = make_step("torch", copy.deepcopy(model), inputs, True, "inductor")
            for _ in range(3):
                step()
        else:
            with VARIANTS[label](), patch(program_cache=False, capture_cache=False):
                step = make_step("ember", copy.deepcopy(model), inputs, True, "inductor")
                for _ in range(3):
                    step()  # compiles the forward and the backward inside the variant
        steps[label] = step
    times: dict[str, list[float]] = {label: [] for label in steps}
    order = list(steps)
    for _ in range(rounds):
        order = order[1:] + order[:1]  # each takes each place in turn: the first
        for label in order:            # step of a round runs slower
            step = steps[label]
            start = time.perf_counter()
            step()
            times[label].append(time.perf_counter() - start)
    return {label: statistics.median(ts) for label, ts in times.items()}


def main() -> None:
    names = sys.argv[1].split(",")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    chosen = sys.argv[3].split(",") if len(sys.argv) > 3 else list(VARIANTS)
    unknown = set(chosen) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; known: {list(VARIANTS)}")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    for name in names:
        # NOTE: the variant compiled first runs 1-4% slower than one compiled after it,
        # even with the same code (ember against ember_again): each variant is measured
        # in both compile orders and the report gives the mean of the two medians
        # (torch.compile's step too: last in the first pass, first in the second)
        order = [*chosen, "torch"]
        passes = [_medians(name, o, rounds) for o in (order, order[::-1])]
        print(name, "  ".join(
            f"{label} {statistics.fmean(p[label] for p in passes) * 1000:.2f} ms"
            f" ({', '.join(f'{p[label] * 1000:.2f}' for p in passes)})"
            for label in passes[0]), flush=True)


if __name__ == "__main__":
    main()
