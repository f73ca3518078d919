"""One benchmark row per (model, compiler): compile, check accuracy, time.

Per model: every compiler compiles and is checked against the fp64 reference first; then
all are timed together (round-robin on CPU, see ``timing.interleaved_median_seconds``);
then cold/warm compile times are measured in subprocesses. A failure in any phase is
caught and recorded in the row (exception type and the first line of its message); the
run goes on with the next compiler and model.

With ``BenchConfig.dynamic`` every compiler but eager is compiled twice, as today and with
``dynamic=True``, and both are timed in the same round-robin: the dynamic row's
``dynamic_ratio`` is its time over the static row's. ``BenchConfig.sizes`` then times every
compiled variant at other batch sizes too (``benchlib.sweep``).
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import zoo

from benchlib import accuracy, coldstart, compilers, sweep, timing
from benchlib.limits import time_limit


@dataclass
class Row:
    """One line of the results. ``status``: ``ok``, ``fail_accuracy`` or ``fail_to_run``
    (then ``error`` says in which phase and why). ``dynamic``: compiled with
    ``dynamic=True``; ``dynamic_ratio``: then its time over the same compiler's static
    time (1.10 = 10% slower). ``sweep_ms``: batch size -> median time in ms (or the error
    at that size) and ``sweep_compiles``: compiles the sweep caused, when ``--sizes``."""

    model: str
    dtype: str
    compiler: str
    status: str = "ok"
    error: str = ""
    time_ms: float | None = None
    speedup: float | None = None
    compile_s: float | None = None
    cold_compile_s: float | None = None
    warm_compile_s: float | None = None
    warm_run_s: float | None = None  # the warm process's second call: the run alone
    cold_phases: dict[str, float] = field(default_factory=dict)
    accuracy: str | None = None
    max_abs_error: float | None = None
    rmse_ratio: float | None = None
    accuracy_detail: str = ""
    peak_memory_mb: float | None = None
    graphs: int | None = None
    graph_breaks: int | None = None
    kernels: int | None = None
    fallbacks: int | None = None
    dynamic: bool = False
    dynamic_ratio: float | None = None
    sweep_ms: dict[int, float | str] = field(default_factory=dict)
    sweep_compiles: int | None = None


@dataclass(frozen=True)
class BenchConfig:
    """What to run: device, dtype, suite, training or inference, Ember's backend, whether
    to measure cold/warm compile time in subprocesses, the time limit of each phase
    (compile + accuracy; timing) of one model in seconds, the compile ``mode``, Ember's
    ``options=``, whether to add a ``dynamic=True`` compile beside each static one, and
    the batch sizes of the size sweep (empty: none), and whether CPU times are means."""

    device: torch.device
    dtype: torch.dtype
    suite: str
    train: bool = False
    ember_backend: str = "inductor"
    cold: bool = True
    time_limit_s: float | None = 900.0
    mode: str | None = None
    ember_options: dict[str, Any] = field(default_factory=dict)
    dynamic: bool = False
    sizes: tuple[int, ...] = ()
    mean_time: bool = False  # CPU times as means, not medians (bench.py --busy)


@dataclass
class Prepared:
    """A compiled variant of one model: its row, the compiler and whether it was compiled
    with ``dynamic=True``, its module (a copy of the model's) and its :class:`Step`
    (``None`` when compiling or checking it failed; the row says why)."""

    row: Row
    compiler: str
    dynamic: bool
    module: torch.nn.Module
    step: Step | None


def describe(exc: BaseException) -> str:
    """``Type: first line of the message``."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}"[:300]


class Step:
    """One timed unit of work: a forward (inference, under ``no_grad``) or a training
    step (forward, backward, SGD step) through ``compiled``."""

    def __init__(self, compiled: Callable[..., Any], module: torch.nn.Module,
                 inputs: tuple[Any, ...], train: bool) -> None:
        self.compiled = compiled
        self.train = train
        self.inputs = accuracy.training_inputs(inputs) if train else inputs
        params = list(module.parameters())
        self.optimizer = torch.optim.SGD(params, lr=1e-3) if train and params else None

    def __call__(self) -> Any:
        if not self.train:
            with torch.no_grad():
                return self.compiled(*self.inputs)
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        for x in self.inputs:
            if isinstance(x, torch.Tensor):
                x.grad = None
        loss = accuracy.scalar_loss(self.compiled(*self.inputs))
        torch.autograd.backward(loss)
        if self.optimizer is not None:
            self.optimizer.step()
        return loss


def make_step(compiler: str, module: torch.nn.Module, inputs: tuple[Any, ...], train: bool,
              ember_backend: str, mode: str | None = None,
              ember_options: dict[str, Any] | None = None, dynamic: bool | None = None
              ) -> Step:
    """Compile ``module`` with ``compiler`` (``dynamic``: see
    :func:`benchlib.compilers.compile_fn`) and wrap it as a :class:`Step`."""
    if train:
        module.train()
    compiled = compilers.compile_fn(compiler, module, ember_backend, mode, ember_options,
                                    dynamic)
    return Step(compiled, module, inputs, train)


def variants(compiler_names: list[str], dynamic: bool) -> list[tuple[str, bool]]:
    """``(compiler, dynamic)`` pairs to bench: each compiler as given, and with
    ``dynamic`` a ``dynamic=True`` compile right after each one but eager."""
    pairs: list[tuple[str, bool]] = []
    for compiler in compiler_names:
        pairs.append((compiler, False))
        if dynamic and compiler != "eager":
            pairs.append((compiler, True))
    return pairs


def bench_model(name: str, config: BenchConfig, compiler_names: list[str]) -> list[Row]:
    """Rows for model ``name``, one per compiler (eager first when asked for, so speedups
    can be computed), and with ``config.dynamic`` one more per compiler but eager."""
    dtype_name = str(config.dtype).removeprefix("torch.")
    pairs = variants(compiler_names, config.dynamic)
    try:
        base, inputs = zoo.get(name).make(config.device, config.dtype, config.suite)
        if config.train:
            base.train()
        reference = accuracy.compute_reference(base, inputs, config.train)
    except Exception as exc:  # noqa: BLE001 - a failure is a result, recorded in the row
        return [Row(name, dtype_name, compilers.label(c, config.ember_backend, d), "fail_to_run",
                    f"model: {describe(exc)}", dynamic=d) for c, d in pairs]
    prepared = [_prepare(name, dtype_name, c, d, base, inputs, reference, config)
                for c, d in pairs]
    steps: dict[str, Callable[[], Any]] = {
        p.row.compiler: p.step for p in prepared if p.step is not None
    }
    try:
        with time_limit(config.time_limit_s, f"timing {name}"):
            times = timing.interleaved_median_seconds(steps, config.device,
                                                      mean=config.mean_time)
    except TimeoutError as exc:
        times = {key: exc for key in steps}
    for p in prepared:
        row = p.row
        if p.step is None:
            continue
        measured = times[row.compiler]
        if isinstance(measured, BaseException):
            row.status, row.error = "fail_to_run", f"timing: {describe(measured)}"
            continue
        row.time_ms = measured * 1e3
        try:
            row.peak_memory_mb = timing.peak_memory_mb(p.step, config.device)
        except Exception as exc:  # noqa: BLE001 - a failure is a result, recorded in the row
            row.error = f"peak memory: {describe(exc)}"
    if config.sizes:
        _sweep(name, prepared, inputs, config)
    if config.cold:
        for p in prepared:
            if p.step is not None and p.compiler != "eager":
                _measure_cold(p, name, config)
    rows = [p.row for p in prepared]
    _ratios(prepared)
    return rows


def _sweep(name: str, prepared: list[Prepared], inputs: tuple[Any, ...],
           config: BenchConfig) -> None:
    """Every variant that compiled, at each of ``config.sizes`` (``row.sweep_ms``,
    ``row.sweep_compiles``)."""
    live = [p for p in prepared if p.step is not None and p.row.status != "fail_to_run"]
    by_label = {p.row.compiler: _sweep_variant(p.compiler, p.step.compiled, p.module,
                                               config.train)
                for p in live if p.step is not None}
    try:
        with time_limit(config.time_limit_s, f"size sweep of {name}"):
            results = sweep.run(by_label, inputs, config.sizes, config.device)
    except TimeoutError as exc:
        for p in live:
            p.row.error = f"size sweep: {describe(exc)}"
        return
    for p in live:
        result = results[p.row.compiler]
        p.row.sweep_compiles = result.compiles
        p.row.sweep_ms = {
            size: describe(value) if isinstance(value, BaseException) else value * 1e3
            for size, value in result.seconds.items()
        }


def _sweep_variant(compiler: str, compiled: Callable[..., Any], module: torch.nn.Module,
                   train: bool) -> sweep.SweepVariant:
    return sweep.SweepVariant(
        bind=lambda xs: Step(compiled, module, xs, train),
        compiles=lambda: compilers.compile_count(compiler, compiled),
    )


def _ratios(prepared: list[Prepared]) -> None:
    """Speedups over eager; each dynamic row's time over its compiler's static time."""
    rows = [p.row for p in prepared]
    eager_ms = next((r.time_ms for r in rows if r.compiler == "eager"), None)
    static_ms = {p.compiler: p.row.time_ms for p in prepared if not p.dynamic}
    for p in prepared:
        row = p.row
        if eager_ms and row.time_ms:
            row.speedup = eager_ms / row.time_ms
        static = static_ms.get(p.compiler)
        if p.dynamic and static and row.time_ms:
            row.dynamic_ratio = row.time_ms / static


def _prepare(name: str, dtype_name: str, compiler: str, dynamic: bool, base: torch.nn.Module,
             inputs: tuple[Any, ...], reference: accuracy.Reference, config: BenchConfig
             ) -> Prepared:
    """Compile (timing the first call), read the stats, check accuracy. The Step is
    ``None`` when something failed (the row says what). A static variant compiles with
    the compiler's default (``dynamic=None``), as without ``--dynamic``."""
    row = Row(name, dtype_name, compilers.label(compiler, config.ember_backend, dynamic),
              dynamic=dynamic)
    module = copy.deepcopy(base)
    phase = "compile"
    try:
        compilers.reset(compiler)
        step = make_step(compiler, module, inputs, config.train, config.ember_backend,
                         config.mode, config.ember_options, True if dynamic else None)
        start = time.perf_counter()
        with time_limit(config.time_limit_s, f"compiling {name} with {row.compiler}"):
            observed = accuracy.observe(step.compiled, module, inputs, config.train)
            timing.synchronize(config.device)
        if compiler != "eager":
            row.compile_s = time.perf_counter() - start
        stats = compilers.graph_stats(compiler, step.compiled)
        row.graphs, row.graph_breaks = stats.graphs, stats.graph_breaks
        row.kernels, row.fallbacks = stats.kernels, stats.fallbacks
        phase = "accuracy"
        result = accuracy.judge(reference, observed)
    except Exception as exc:  # noqa: BLE001 - a failure is a result, recorded in the row
        row.status, row.error = "fail_to_run", f"{phase}: {describe(exc)}"
        return Prepared(row, compiler, dynamic, module, None)
    row.accuracy, row.accuracy_detail = result.label, result.reason
    row.max_abs_error, row.rmse_ratio = result.max_abs_error, result.rmse_ratio
    if not result.passed:
        row.status = "fail_accuracy"
    return Prepared(row, compiler, dynamic, module, step)


def _measure_cold(prepared: Prepared, name: str, config: BenchConfig) -> None:
    row = prepared.row
    job = coldstart.ColdJob(name, prepared.compiler, config.ember_backend, str(config.device),
                            row.dtype, config.suite, config.train, config.mode,
                            config.ember_options, prepared.dynamic)
    measured = coldstart.measure(job)
    if "error" in measured:
        row.error = f"cold compile: {measured['error']}"
    else:
        row.cold_compile_s = float(measured["cold_s"])  # type: ignore[arg-type]
        row.warm_compile_s = float(measured["warm_s"])  # type: ignore[arg-type]
        run = measured.get("run_s")
        row.warm_run_s = float(run) if isinstance(run, (int, float)) else None
        row.cold_phases = dict(measured.get("cold_phases") or {})


def tiny_function(x: torch.Tensor) -> torch.Tensor:
    """The per-call overhead probe: one cheap op on a one-element tensor."""
    return x + 1


def overhead(compiler_names: list[str], device: torch.device, ember_backend: str,
             mode: str | None = None, ember_options: dict[str, Any] | None = None
             ) -> dict[str, float | str]:
    """Per-call host overhead of each compiler's compiled :func:`tiny_function`, in µs
    (or the error that stopped it)."""
    results: dict[str, float | str] = {}
    x = torch.randn(1, device=device)
    for compiler in compiler_names:
        key = compilers.label(compiler, ember_backend)
        try:
            compilers.reset(compiler)
            fn = compilers.compile_fn(compiler, tiny_function, ember_backend, mode,
                                      ember_options)
            with torch.no_grad():
                results[key] = timing.per_call_overhead_us(functools.partial(fn, x), device)
        except Exception as exc:  # noqa: BLE001 - a failure is a result, recorded in the row
            results[key] = describe(exc)
    return results
