"""The matmul suite's rows: every workload compiled by every variant (a compiler and a
``mode``) in one process, checked against an fp64 reference, then timed together.

Per workload: each variant compiles and runs once (the ``compile`` time: the first call,
compilation included, with caches of its own that start empty: Ember's, inductor's and
Triton's, so no variant compiles warm from another's kernels or tuning decisions) and its
result is judged by the accuracy rule of ``benchlib.accuracy`` (eager in the model's
dtype, with its tolerance, and the fp64 reference); then all variants are timed together (``timing.interleaved_median_seconds``:
``do_bench`` medians on CUDA, round-robin medians on CPU); then, for the variants that
autotune, the compile time with a warm autotune cache in a fresh subprocess
(``benchlib.matmul_warm``). A failure in any phase is recorded in the row; the run goes
on. A variant whose ``mode`` Ember does not implement yet (``NotImplementedError`` naming
the mode) is a row ``not_implemented``, shown as ``n/a (mode not implemented)``.

NOTE: torch.compile compiles Triton kernels in worker processes started at its first
compile, which keep the ``TRITON_CACHE_DIR`` they started with (the warm-up's): its
Triton cache is shared by its variants in this process (a kernel with the same source
is not compiled twice). The warm-autotune subprocess starts its own workers.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchlib import accuracy, compilers, matmul_warm, timing
from benchlib.limits import time_limit
from benchlib.matmul import Workload
from benchlib.runner import Step, describe


@dataclass(frozen=True)
class Variant:
    """A column of the suite: ``compiler`` (of :data:`benchlib.compilers.COMPILERS`)
    compiled with ``mode``."""

    name: str
    compiler: str
    mode: str | None

    @property
    def autotunes(self) -> bool:
        """Whether the mode benchmarks candidates at compile time (its warm-autotune-cache
        compile time is measured too)."""
        return self.mode is not None and self.mode.startswith("max-autotune")


VARIANTS: tuple[Variant, ...] = (
    Variant("eager", "eager", None),
    Variant("torch", "torch", None),
    Variant("torch-max-autotune", "torch", "max-autotune"),
    Variant("ember", "ember", None),
    Variant("ember-max-autotune", "ember", "max-autotune-no-cudagraphs"),
)
"""Every variant, eager first (the baseline of the speeds). Ember's autotuning variant
is ``max-autotune-no-cudagraphs``: autotuning alone, so its figures are the templates'
and not CUDA graphs'."""

EMBER_VARIANTS = tuple(v.name for v in VARIANTS if v.compiler == "ember")


def variant(name: str) -> Variant:
    """The variant called ``name``.

    Raises:
        KeyError: naming the known variants.
    """
    for v in VARIANTS:
        if v.name == name:
            return v
    raise KeyError(f"no variant {name!r}; known: {', '.join(v.name for v in VARIANTS)}")


NOT_IMPLEMENTED = "not_implemented"
"""The status of a variant whose mode Ember does not implement yet."""


@dataclass
class MatmulRow:
    """One (workload, variant) cell group. ``status``: ``ok``, ``fail_accuracy``,
    ``fail_to_run`` (``error`` says in which phase and why) or :data:`NOT_IMPLEMENTED`.
    ``compile_s``: the first call in this process (compilation and one run);
    ``warm_autotune_s``: the first call in a fresh process whose autotune cache this run
    filled (autotuning variants only); ``tflops``: the workload's matmul FLOPs over
    ``time_ms``."""

    workload: str
    family: str
    dtype: str
    variant: str
    status: str = "ok"
    error: str = ""
    time_ms: float | None = None
    tflops: float | None = None
    compile_s: float | None = None
    warm_autotune_s: float | None = None
    accuracy: str | None = None
    accuracy_detail: str = ""
    max_abs_error: float | None = None
    kernels: int | None = None
    fallbacks: int | None = None


@dataclass(frozen=True)
class MatmulConfig:
    """What to run: device, dtype, the variants (names of :data:`VARIANTS`), the scale of
    the workloads (so a warm-autotune subprocess rebuilds the same one), the time limit
    of each phase in seconds, whether to measure warm-autotune compile times, Ember's
    backend, and the folder under which each (workload, variant) compiles with caches of
    its own (``None``: the process's caches, shared; then no warm-autotune measurement,
    which needs to know them)."""

    device: torch.device
    dtype: torch.dtype
    variants: tuple[str, ...]
    time_limit_s: float | None = 900.0
    warm: bool = True
    ember_backend: str = "inductor"
    cache_root: Path | None = None


@dataclass
class _Prepared:
    row: MatmulRow
    variant: Variant
    step: Step | None
    caches: matmul_warm.CacheDirs | None


def warm_up(compiler_names: set[str], device: torch.device) -> dict[str, str]:
    """Compile and run a one-element function with each compiler, so that what a process
    pays once (imports, loading stages, the first compile of anything) is not counted in
    the first workload's compile time. Returns the errors, by compiler (a compiler that
    fails here fails again, and is recorded, in its rows)."""
    errors: dict[str, str] = {}
    x = torch.ones(1, device=device)
    for compiler in sorted(compiler_names - {"eager"}):
        try:
            compilers.reset(compiler)
            with torch.no_grad():
                compilers.compile_fn(compiler, _one_element)(x)
            timing.synchronize(device)
        except Exception as exc:  # noqa: BLE001 - reported by the caller, then in the rows
            errors[compiler] = describe(exc)
    return errors


def _one_element(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def bench_workload(work: Workload, config: MatmulConfig) -> list[MatmulRow]:
    """Rows for ``work``, one per variant of ``config`` (in that order)."""
    dtype_name = str(config.dtype).removeprefix("torch.")
    chosen = [variant(name) for name in config.variants]
    try:
        base, inputs = work.make(config.device, config.dtype)
        reference = accuracy.compute_reference(base, inputs, train=False)
    except Exception as exc:  # noqa: BLE001 - a failure is a result, recorded in the row
        return [MatmulRow(work.name, work.family.name, dtype_name, v.name, "fail_to_run",
                          f"workload: {describe(exc)}") for v in chosen]
    for compiler in {v.compiler for v in chosen}:
        # Earlier workloads' compiles dropped: no recompile limit, no automatic dynamic
        # shapes from another size; within the workload only counters are reset, so
        # every variant stays compiled until it is timed.
        compilers.reset(compiler)
    prepared = [_prepare(work, dtype_name, v, base, inputs, reference, config,
                         _own_caches(config, work, v))
                for v in chosen]
    steps: dict[str, Callable[[], Any]] = {
        p.variant.name: p.step for p in prepared if p.step is not None
    }
    try:
        with time_limit(config.time_limit_s, f"timing {work.name}"):
            times = timing.interleaved_median_seconds(steps, config.device)
    except TimeoutError as exc:
        times = {key: exc for key in steps}
    for p in prepared:
        if p.step is None:
            continue
        measured = times[p.variant.name]
        if isinstance(measured, BaseException):
            p.row.status, p.row.error = "fail_to_run", f"timing: {describe(measured)}"
            continue
        p.row.time_ms = measured * 1e3
        p.row.tflops = work.flops / measured / 1e12
    if config.warm:
        for p in prepared:
            if p.step is not None and p.variant.autotunes and p.caches is not None:
                _measure_warm(p, work, config, p.caches)
    return [p.row for p in prepared]


def _own_caches(config: MatmulConfig, work: Workload, v: Variant
                ) -> matmul_warm.CacheDirs | None:
    """Empty cache directories for ``v`` compiling ``work`` (``None``: not isolated)."""
    if config.cache_root is None:
        return None
    folder = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{work.name}-{config.dtype}")
    return matmul_warm.CacheDirs.under(config.cache_root / folder / v.name)


def _prepare(work: Workload, dtype_name: str, v: Variant, base: torch.nn.Module,
             inputs: tuple[torch.Tensor, ...], reference: accuracy.Reference,
             config: MatmulConfig, caches: matmul_warm.CacheDirs | None) -> _Prepared:
    """Compile ``v`` and run it once (timed: ``compile_s``) with ``caches`` (``None``:
    the process's), read its stats, judge its result. The step is ``None`` when it could
    not run (the row says why)."""
    if caches is None:
        return _compile_and_check(work, dtype_name, v, base, inputs, reference, config, None)
    with matmul_warm.using_caches(caches):
        return _compile_and_check(work, dtype_name, v, base, inputs, reference, config,
                                  caches)


def _compile_and_check(work: Workload, dtype_name: str, v: Variant, base: torch.nn.Module,
                       inputs: tuple[torch.Tensor, ...], reference: accuracy.Reference,
                       config: MatmulConfig, caches: matmul_warm.CacheDirs | None
                       ) -> _Prepared:
    row = MatmulRow(work.name, work.family.name, dtype_name, v.name)
    module = copy.deepcopy(base)
    phase = "compile"
    try:
        compilers.reset_counters(v.compiler)
        compiled = compilers.compile_fn(v.compiler, module, config.ember_backend, v.mode)
        start = time.perf_counter()
        with time_limit(config.time_limit_s, f"compiling {work.name} with {v.name}"):
            observed = accuracy.observe(compiled, module, inputs, train=False)
            timing.synchronize(config.device)
        if v.compiler != "eager":
            row.compile_s = time.perf_counter() - start
        stats = compilers.graph_stats(v.compiler, compiled)
        row.kernels, row.fallbacks = stats.kernels, stats.fallbacks
        phase = "accuracy"
        result = accuracy.judge(reference, observed)
    except NotImplementedError as exc:
        if v.mode is not None and f"mode={v.mode!r}" in str(exc):
            row.status, row.error = NOT_IMPLEMENTED, describe(exc)
        else:
            row.status, row.error = "fail_to_run", f"{phase}: {describe(exc)}"
        return _Prepared(row, v, None, caches)
    except Exception as exc:  # noqa: BLE001 - a failure is a result, recorded in the row
        row.status, row.error = "fail_to_run", f"{phase}: {describe(exc)}"
        return _Prepared(row, v, None, caches)
    row.accuracy, row.accuracy_detail = result.label, result.reason
    row.max_abs_error = result.max_abs_error
    if not result.passed:
        row.status = "fail_accuracy"
    return _Prepared(row, v, Step(compiled, module, inputs, train=False), caches)


def _measure_warm(p: _Prepared, work: Workload, config: MatmulConfig,
                  caches: matmul_warm.CacheDirs) -> None:
    job = matmul_warm.WarmJob(work.family.name, list(work.shape), p.variant.compiler,
                              p.variant.mode, str(config.device), p.row.dtype,
                              config.ember_backend)
    measured = matmul_warm.measure(job, caches)
    if isinstance(measured, str):
        p.row.error = f"warm autotune: {measured}"
    else:
        p.row.warm_autotune_s = measured
