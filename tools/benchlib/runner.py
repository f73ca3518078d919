"""One benchmark row per (model, compiler): compile, check accuracy, time.

Per model: every compiler compiles and is checked against the fp64 reference first; then
all are timed together (round-robin on CPU, see ``timing.interleaved_median_seconds``);
then cold/warm compile times are measured in subprocesses. A failure in any phase is
caught and recorded in the row (exception type and the first line of its message); the
run goes on with the next compiler and model.
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

from benchlib import accuracy, coldstart, compilers, timing
from benchlib.limits import time_limit


@dataclass
class Row:
    """One line of the results. ``status``: ``ok``, ``fail_accuracy`` or ``fail_to_run``
    (then ``error`` says in which phase and why)."""

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
    accuracy: str | None = None
    max_abs_error: float | None = None
    rmse_ratio: float | None = None
    accuracy_detail: str = ""
    peak_memory_mb: float | None = None
    graphs: int | None = None
    graph_breaks: int | None = None
    kernels: int | None = None
    fallbacks: int | None = None


@dataclass(frozen=True)
class BenchConfig:
    """What to run: device, dtype, suite, training or inference, Ember's backend, whether
    to measure cold/warm compile time in subprocesses, the time limit of each phase
    (compile + accuracy; timing) of one model in seconds, the compile ``mode`` and
    Ember's ``options=``."""

    device: torch.device
    dtype: torch.dtype
    suite: str
    train: bool = False
    ember_backend: str = "inductor"
    cold: bool = True
    time_limit_s: float | None = 900.0
    mode: str | None = None
    ember_options: dict[str, Any] = field(default_factory=dict)


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
              ember_options: dict[str, Any] | None = None) -> Step:
    """Compile ``module`` with ``compiler`` and wrap it as a :class:`Step`."""
    if train:
        module.train()
    compiled = compilers.compile_fn(compiler, module, ember_backend, mode, ember_options)
    return Step(compiled, module, inputs, train)


def bench_model(name: str, config: BenchConfig, compiler_names: list[str]) -> list[Row]:
    """Rows for model ``name``, one per compiler (eager first when asked for, so speedups
    can be computed)."""
    dtype_name = str(config.dtype).removeprefix("torch.")
    try:
        base, inputs = zoo.get(name).make(config.device, config.dtype, config.suite)
        if config.train:
            base.train()
        reference = accuracy.compute_reference(base, inputs, config.train)
    except Exception as exc:  # noqa: BLE001 - a failure is a result, recorded in the row
        return [Row(name, dtype_name, compilers.label(c, config.ember_backend), "fail_to_run",
                    f"model: {describe(exc)}") for c in compiler_names]
    prepared = [_prepare(name, dtype_name, c, base, inputs, reference, config)
                for c in compiler_names]
    steps: dict[str, Callable[[], Any]] = {
        row.compiler: step for row, step in prepared if step is not None
    }
    try:
        with time_limit(config.time_limit_s, f"timing {name}"):
            times = timing.interleaved_median_seconds(steps, config.device)
    except TimeoutError as exc:
        times = {key: exc for key in steps}
    for row, step in prepared:
        if step is None:
            continue
        measured = times[row.compiler]
        if isinstance(measured, BaseException):
            row.status, row.error = "fail_to_run", f"timing: {describe(measured)}"
            continue
        row.time_ms = measured * 1e3
        try:
            row.peak_memory_mb = timing.peak_memory_mb(step, config.device)
        except Exception as exc:  # noqa: BLE001 - a failure is a result, recorded in the row
            row.error = f"peak memory: {describe(exc)}"
    if config.cold:
        for row, step in prepared:
            if step is not None and row.compiler != "eager":
                _measure_cold(row, name, config)
    rows = [row for row, _ in prepared]
    eager_ms = next((r.time_ms for r in rows if r.compiler == "eager"), None)
    for row in rows:
        if eager_ms and row.time_ms:
            row.speedup = eager_ms / row.time_ms
    return rows


def _prepare(name: str, dtype_name: str, compiler: str, base: torch.nn.Module,
             inputs: tuple[Any, ...], reference: accuracy.Reference, config: BenchConfig
             ) -> tuple[Row, Step | None]:
    """Compile (timing the first call), read the stats, check accuracy. The Step is
    ``None`` when something failed (the row says what)."""
    row = Row(name, dtype_name, compilers.label(compiler, config.ember_backend))
    module = copy.deepcopy(base)
    phase = "compile"
    try:
        compilers.reset(compiler)
        step = make_step(compiler, module, inputs, config.train, config.ember_backend,
                         config.mode, config.ember_options)
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
        return row, None
    row.accuracy, row.accuracy_detail = result.label, result.reason
    row.max_abs_error, row.rmse_ratio = result.max_abs_error, result.rmse_ratio
    if not result.passed:
        row.status = "fail_accuracy"
    return row, step


def _measure_cold(row: Row, name: str, config: BenchConfig) -> None:
    compiler = "ember" if row.compiler.startswith("ember") else row.compiler
    job = coldstart.ColdJob(name, compiler, config.ember_backend, str(config.device),
                            row.dtype, config.suite, config.train, config.mode,
                            config.ember_options)
    measured = coldstart.measure(job)
    if "error" in measured:
        row.error = f"cold compile: {measured['error']}"
    else:
        row.cold_compile_s = float(measured["cold_s"])  # type: ignore[arg-type]
        row.warm_compile_s = float(measured["warm_s"])  # type: ignore[arg-type]


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
