"""Ember's matmul choices measured against each other on one zoo model, in one process:
torch.compile default, Ember as it is, Ember with a bias alone not counted as fusion
(``matmul_template.BIAS_COUNTS_AS_FUSION = False``) and Ember with every matmul on
cuBLAS (``forced_matmul("extern")``), and Ember with every matmul on cuBLAS except one
whose result the extern would pad ("ember cuBLAS unless padded"), and Ember without the
epilogue store's cost in the heuristic ("ember_no_epilogue_cost"), and Ember with some of
the heuristic's templates sent to cuBLAS: the pointer template in the TMA variant's place
("ember_no_tma"), only the TMA templates kept ("ember_tma_only"), only the epilogue-only
ones ("ember_epilogue_only") or only those with an operand prologue or padding
("ember_prologue_only"), and the heuristic before session 43: an epilogue that a reduction
reads counted as saving two passes ("ember_reduced_two_passes"), and the class's first
config whatever its last wave ("ember_first_config"), and the min cut without its
tie-break ("ember_no_tie_break"); for pooling, Ember with
every pooling backward scattered as before the gather ("ember_pool_scatter") and with the
gathered gradient fused into its readers, not stored ("ember_pool_gather_fused"); for
variances, Ember with the GPU's in two passes, not the one-pass ``m2``
("ember_variance_two_pass"), or with m2's per-element division ("ember_m2_divide"); for
reductions, Ember with none taking in the pointwise kernel it reads ("ember_no_absorb"),
with no column sum inside a row kernel ("ember_no_mixed") or with 264 or 1056 programs
walking the rows of one ("ember_mixed_264", "ember_mixed_528", "ember_mixed_1056",
"ember_mixed_2112"), or
stepping over the plain row kernel's row block ("ember_mixed_tile_1"); with 16-bit
column tiles 128 or 256 wide ("ember_column_128", "ember_column_256"); with every
column reduction run over its rows ("ember_columns_as_rows", ``mixed.as_rows``)
and with no store inside a split reduction ("ember_split_no_stores"); with other pointwise
blocks and warps ("ember_pw_2048_w8": ``XBLOCK`` 2048, up to 8 warps); for launches, Ember
passing pointers as addresses ("ember_pointer_ints") or launching through torch's C++
launcher ("ember_static_launch"); for the partitioner,
Ember saving every forward value its backward reads ("ember_save_everything"), letting
the min cut recompute what a backward matmul or convolution reads
("ember_recompute_conv_inputs": ``aot.save_conv_inputs`` off), or only what a backward
matmul reads ("ember_recompute_mm_inputs").
Prints each
variant's heuristic choices
(``EMBER_LOGS=autotune`` lines, counted) and its time (``do_bench`` medians, the variants
timed round-robin ``ROUNDS`` times), and its peak memory above the inputs.
``python3 tools/gpu/ab_matmul_choice.py [hf_gpt2] [bfloat16] [full] [ember,"ember all cuBLAS"] [train]``
(the fourth argument: the variants, comma-separated, or ``all``; ``train``: the bench's
training step, forward, backward and SGD step, of a copy of the model for each variant)."""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import functools
import io
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ember.frontend as ef
import torch
import zoo
from benchlib.aot_variants import aot_config
from ember.aot.partition import extern_reads, mincut
from benchlib.runner import make_step
from ember.inductor import absorb, mixed
from ember.inductor.codegen.triton import backend as triton_backend
from ember.inductor.codegen.triton import generate as triton_generate
from ember.inductor.codegen.triton import (
    heuristics,
    matmul_choice,
    mixed_writer,
    split_writer,
    welford,
)
from ember.inductor.codegen.triton.matmul_choice import forced_matmul
from ember.inductor.codegen.triton.matmul_tma import assume_capability
from ember.inductor.loop_ir import Reduce, Store, reduction_phases
from ember.inductor.loop_ir import index as loop_index
from ember.inductor.lowering import graph_lowering, matmul_template, reductions
from ember.inductor.lowering.pooling import covering, max_pool
from ember.runtime.compiled import triton_fast_launch
from ember.runtime.config import patch
from triton.testing import do_bench


@contextlib.contextmanager
def _cublas_unless_padded() -> Iterator[None]:
    """Every matmul the heuristic would write as a template goes to cuBLAS, except one
    whose result is unaligned (the extern would pad it: GPT-2's LM head)."""
    real = matmul_choice.heuristic_choice

    def choice(problem, tma=None):  # type: ignore[no-untyped-def]
        picked = real(problem, tma)
        n = matmul_choice._hints(problem)[2]
        aligned = n % max(1, 16 // problem.dtype.itemsize) == 0
        return matmul_choice.EXTERN if aligned else picked

    with mock.patch.object(matmul_choice, "heuristic_choice", choice):
        yield


@contextlib.contextmanager
def _templates_only(keep: Callable[[Any, str], bool]) -> Iterator[None]:
    """Every template the heuristic picks that ``keep(problem, config)`` rejects goes to
    cuBLAS."""
    real = matmul_choice.heuristic_choice

    def choice(problem, tma=None):  # type: ignore[no-untyped-def]
        picked = real(problem, tma)
        return picked if picked == matmul_choice.EXTERN or keep(problem, picked) \
            else matmul_choice.EXTERN

    with mock.patch.object(matmul_choice, "heuristic_choice", choice):
        yield


@contextlib.contextmanager
def _pointer_ints() -> Iterator[None]:
    """Pointers passed to Triton's C launcher as addresses (Triton's launcher, then)."""
    with mock.patch.object(triton_fast_launch, "POINTERS_AS_INTS", True), \
            patch(torch_launcher=False):
        yield


#: round-robin rounds: the GPU's clock drifts between rounds (H200: one variant's three
#: rounds spread 5.05-5.60 ms), so each round's speed is taken against torch's in it
ROUNDS = 5


def _refused(*args: object) -> None:
    return None


@contextlib.contextmanager
def _split_without_stores() -> Iterator[None]:
    """The split rule before session 41: a store inside the pass (but a run-time check's)
    keeps a reduction from splitting, so nothing that stores fuses into one."""
    def splittable(kernel):  # type: ignore[no-untyped-def]
        _, phases = reduction_phases(kernel)
        return len(phases) == 1 and all(
            not (isinstance(s, Store) and s.buffer != "kernel_errors")
            and not (isinstance(s, Reduce) and s.op in ("argmax", "argmin"))
            for s in phases[0].inner)

    with mock.patch.object(split_writer, "splittable", splittable), \
            mock.patch.object(triton_generate, "splittable", splittable), \
            mock.patch.object(triton_backend, "splittable", splittable):
        yield


@contextlib.contextmanager
def _pointwise_config(xblock: int, warps: int) -> Iterator[None]:
    with mock.patch.object(heuristics, "POINTWISE_BLOCK", xblock), \
            mock.patch.object(heuristics, "POINTWISE_WARPS", warps):
        yield


VARIANTS: dict[str, Callable[[], contextlib.AbstractContextManager[Any]]] = {
    "ember": contextlib.nullcontext,
    "ember bias->cuBLAS": lambda: mock.patch.object(
        matmul_template, "BIAS_COUNTS_AS_FUSION", False),
    "ember all cuBLAS": lambda: forced_matmul("extern"),
    # the index builders without the split-dimension fold: a view that splits a matmul
    # result's rows keeps its consumer out of the template's epilogue
    "ember no div/mod fold": lambda: mock.patch.object(
        loop_index, "_fold_div_mod", lambda terms: None),
    "ember cuBLAS unless padded": _cublas_unless_padded,
    # which of the heuristic's templates lose: the TMA variant off (pointer templates in
    # its place), only the TMA ones kept, only the epilogue-only ones kept
    "ember_no_tma": lambda: assume_capability((8, 0)),
    "ember_tma_only": lambda: _templates_only(lambda p, c: c.startswith("tma_")),
    "ember_epilogue_only": lambda: _templates_only(lambda p, c: p.epilogue_only),
    "ember_prologue_only": lambda: _templates_only(lambda p, c: not p.epilogue_only),
    # the epilogue's store at BANDWIDTH: the cost model before it was measured
    "ember_no_epilogue_cost": lambda: mock.patch.object(
        matmul_choice, "EPILOGUE_BANDWIDTH", matmul_choice.BANDWIDTH),
    # an epilogue a reduction reads saves two passes and a launch (before session 43)
    "ember_reduced_two_passes": lambda: mock.patch.object(
        matmul_choice, "fusion_saving",
        lambda p, real=matmul_choice.fusion_saving: real(dataclasses.replace(p, reduced=False))),
    # a forward value that a backward matmul reads left to the min cut (before session
    # 50: gpt recomputed each GELU output in its backward, 100 MB read and written a
    # layer); a convolution's operands still saved (extern_reads.py)
    "ember_recompute_mm_inputs": lambda: mock.patch.object(
        extern_reads, "BACKWARD_EXTERN_OPS",
        extern_reads.BACKWARD_EXTERN_OPS - {"aten::mm.default"}),
    # a saved matmul operand that the forward pads saved as it is, not as the padded
    # copy (before session 51: hf_llama computed its MLP's product twice in the forward
    # and padded it again in the backward)
    "ember_no_saved_padding": lambda: mock.patch.object(
        graph_lowering, "padded_saved_output", lambda *args: None),
    # the min cut choosing arbitrarily between cuts of equal bytes (before session 43)
    "ember_no_tie_break": lambda: mock.patch.object(mincut, "RECOMPUTE_TIE_BREAK", 0),
    # the class's first config however empty its last wave
    "ember_first_config": lambda: mock.patch.object(matmul_choice, "WAVE_TOLERANCE", 1.0),
    # pooling backward on a GPU as an accumulating scatter: the lowering before the gather
    "ember_pool_scatter": lambda: mock.patch.dict(
        covering.GATHER_LAYOUTS,
        {k: v for k, v in covering.GATHER_LAYOUTS.items() if k != "cuda"}, clear=True),
    # the gathered max-pool gradient recomputed in each kernel reading it, not stored
    "ember_pool_gather_fused": lambda: mock.patch.object(max_pool, "STORE_GATHERED", False),
    # a GPU's variances in two passes, not the one-pass m2 beside the sum
    "ember_variance_two_pass": lambda: mock.patch.dict(
        reductions.VARIANCE_FORMS, {"cuda": "two_pass"}),
    # m2's Welford update dividing each element's deviation by its lane's count (session
    # 39), not multiplying by one reciprocal of the loop step
    "ember_m2_divide": lambda: mock.patch.object(welford, "update", _update_dividing),
    # no reduction takes in the pointwise kernel it reads (session 41) ...
    "ember_no_absorb": lambda: mock.patch.object(absorb, "absorbing", _refused),
    # no column sum runs inside its row kernel (session 44): a norm's weight gradient in
    # a split column reduction of its own
    "ember_no_mixed": lambda: mock.patch.object(mixed, "mixing", _refused),
    # the row kernel summing columns on other program counts (264, two an SM: the
    # default since session 53; 528 before)
    "ember_mixed_528": lambda: mock.patch.object(mixed_writer, "MIXED_PROGRAMS", 528),
    "ember_mixed_264": lambda: mock.patch.object(mixed_writer, "MIXED_PROGRAMS", 264),
    "ember_mixed_1056": lambda: mock.patch.object(mixed_writer, "MIXED_PROGRAMS", 1056),
    "ember_mixed_2112": lambda: mock.patch.object(mixed_writer, "MIXED_PROGRAMS", 2112),
    # 16-bit column tiles 128 or 256 wide (a bias gradient with GELU's gradient inside:
    # gpt's took 159 us a layer where torch.compile's two kernels took 143)
    "ember_column_128": lambda: mock.patch.dict(heuristics.COLUMN_XBLOCKS, {2: 128}),
    "ember_column_256": lambda: mock.patch.dict(heuristics.COLUMN_XBLOCKS, {2: 256}),
    # every column reduction's group run over its rows, its sums across them (an
    # experiment, off by default: mixed.as_rows)
    "ember_columns_as_rows": lambda: mock.patch.object(
        triton_backend.TritonBackend, "column_groups_as_rows", True),
    # ... stepping over one row block of the plain row kernel's (rows of 768: one row)
    "ember_mixed_tile_1": lambda: mock.patch.object(mixed_writer, "MIXED_TILE", 1),
    # pointwise kernels' XBLOCK and warps (the default: 1024 elements, 4 warps)
    **{f"ember_pw_{x}_w{w}": functools.partial(_pointwise_config, x, w)
       for x, w in ((512, 4), (1024, 8), (2048, 4), (2048, 8), (4096, 8))},
    # ... nor may a split reduction store values from its partial programs
    "ember_split_no_stores": _split_without_stores,
    # the launch experiments (session 45): pointers passed to Triton's C launcher as
    # addresses (with Triton's launcher), or every binary on Triton's launcher (torch's
    # C++ launcher is the default since session 48)
    "ember_pointer_ints": _pointer_ints,
    "ember_triton_launcher": lambda: patch(torch_launcher=False),
    # the partitioner saving every value the backward reads, or the matmul/conv inputs
    "ember_save_everything": lambda: aot_config(save_everything=True),
    "ember_recompute_conv_inputs": lambda: aot_config(save_conv_inputs=False),
}


def _update_dividing(acc: str, arg: str, mask: str, ty: str) -> list[str]:
    return [
        f"{acc}_x = {arg}.to({ty})",
        f"{acc}_n = {acc}_n + tl.where({mask}, 1.0, 0.0).to({ty})",
        f"{acc}_d = tl.where({mask}, {acc}_x - {acc}_mean, 0.0)",
        f"{acc}_mean = {acc}_mean + {acc}_d / tl.maximum({acc}_n, 1.0)",
        f"{acc} = {acc} + {acc}_d * tl.where({mask}, {acc}_x - {acc}_mean, 0.0)",
    ]


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "hf_gpt2"
    dtype = getattr(torch, sys.argv[2]) if len(sys.argv) > 2 else torch.bfloat16
    suite = sys.argv[3] if len(sys.argv) > 3 else "full"
    # NOTE: one variant a process is the clean measurement: two ef.compile of one model
    # in one process may share the frontend's per-code caches
    chosen = sys.argv[4].split(",") if len(sys.argv) > 4 and sys.argv[4] != "all" \
        else list(VARIANTS)
    train = sys.argv[5:] == ["train"]
    unknown = set(chosen) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; known: {list(VARIANTS)}")
    model, inputs = zoo.get(name).make("cuda", dtype, suite)
    runs: dict[str, Callable[[], object]] = {}
    if train:
        runs["torch"] = make_step("torch", copy.deepcopy(model), inputs, True, "inductor")
    else:
        torch_fn = torch.compile(model)
        runs["torch"] = lambda: torch_fn(*inputs)
    for label in chosen:
        variant = VARIANTS[label]
        step = make_step("ember", copy.deepcopy(model), inputs, True, "inductor") \
            if train else None
        fn = ef.compile(model) if step is None else None
        err = io.StringIO()
        with contextlib.nullcontext() if train else torch.no_grad(), variant(), \
                contextlib.redirect_stderr(err), \
                patch(logs=frozenset({"autotune"}), program_cache=False, capture_cache=False):
            step() if fn is None else fn(*inputs)
        choices = collections.Counter(
            line.split("] ", 1)[0].split("matmul ", 1)[-1] + "] -> " + line.rsplit(": ", 1)[-1]
            for line in err.getvalue().splitlines() if "matmul " in line)
        print(f"===== {label}: matmul choices")
        for text, count in sorted(choices.items()):
            print(f"  {count} x {text[:200]}")
        runs[label] = step if fn is None else (lambda fn=fn: fn(*inputs))
    times: dict[str, list[float]] = {k: [] for k in runs}
    peaks: dict[str, float] = {}
    with contextlib.nullcontext() if train else torch.no_grad():
        for _ in range(ROUNDS):
            for label, run in runs.items():
                times[label].append(do_bench(run, warmup=25, rep=200))
        for label, run in runs.items():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            run()
            torch.cuda.synchronize()
            peaks[label] = (torch.cuda.max_memory_allocated() - base) / 2**20
    kind = " train" if train else ""
    print(f"===== {name} {dtype} {suite}{kind}: median of {ROUNDS} round-robin do_bench medians "
          f"(speed: torch's time over the variant's in the same round, median of rounds)")
    for label, ts in times.items():
        t = statistics.median(ts)
        speed = statistics.median(r / x for r, x in zip(times["torch"], ts))
        print(f"  {label:22s} {t:8.3f} ms  ({', '.join(f'{x:.3f}' for x in ts)})  "
              f"speed vs torch {speed:.3f}x  peak {peaks[label]:.0f} MiB")


if __name__ == "__main__":
    main()
