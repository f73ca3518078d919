"""The readable table and the JSON file of a bench run."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import platform
import sys
from pathlib import Path
from typing import Any

import torch

from benchlib.runner import Row


def environment(device: torch.device) -> dict[str, str]:
    """Versions and the device: what a table must be quoted with."""
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    if device.type == "cuda":
        device_name = torch.cuda.get_device_name(device)
    else:
        threads = torch.get_num_threads()
        device_name = f"{_cpu_name()}, {os.cpu_count()} cores, torch threads {threads}"
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton_version,
        "device": device_name,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "command": " ".join(_env_prefix() + ["python"] + sys.argv),
    }


def _env_prefix() -> list[str]:
    """The environment settings that change the figures, as a command prefix."""
    return [f"{k}={os.environ[k]}" for k in ("OMP_NUM_THREADS",) if k in os.environ]


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _fmt(value: Any, spec: str, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:{spec}}{suffix}"


def _memory(mib: float | None) -> str:
    # Peak memory is measured on CUDA only; "n/a" says it was not measured, not zero.
    return "n/a" if mib is None else f"{mib:,.0f}"


def format_time(ms: float | None) -> str:
    """``ms`` milliseconds as the tables print it (``-`` for None)."""
    if ms is None:
        return "-"
    if ms < 1:
        return f"{ms * 1e3:.1f}us"
    return f"{ms:.2f}ms" if ms < 1000 else f"{ms / 1e3:.2f}s"


COLUMNS = ("model", "dtype", "compiler", "time", "speedup", "compile", "cold", "warm",
           "warm-run", "accuracy", "graphs", "breaks", "kernels", "fallbacks", "peak MiB")
"""``warm``: a fresh process's first call over filled caches (compile and one run);
``warm-run``: that minus its second call (the run alone): the warm compile itself."""


def _cells(rows: list[Row]) -> tuple[list[list[str]], list[str]]:
    """Table cells (one list per row, grouped by model) and the notes under the table."""
    lines: list[list[str]] = []
    notes: list[str] = []
    previous = None
    for row in rows:
        first = (row.model, row.dtype) != previous
        model, dtype = (row.model, row.dtype) if first else ("", "")
        previous = (row.model, row.dtype)
        if row.status == "fail_to_run":
            lines.append([model, dtype, row.compiler, "FAILED"] + [""] * (len(COLUMNS) - 4))
            notes.append(f"{row.model} {row.dtype} / {row.compiler}: {row.error}")
            continue
        lines.append([
            model, dtype, row.compiler, format_time(row.time_ms), _fmt(row.speedup, ".2f", "x"),
            _fmt(row.compile_s, ".1f", "s"), _fmt(row.cold_compile_s, ".1f", "s"),
            _fmt(row.warm_compile_s, ".1f", "s"), _fmt(_warm_compile(row), ".2f", "s"),
            row.accuracy or "-",
            _fmt(row.graphs, "d"), _fmt(row.graph_breaks, "d"), _fmt(row.kernels, "d"),
            _fmt(row.fallbacks, "d"), _memory(row.peak_memory_mb),
        ])
        for extra in (row.accuracy_detail, row.error):
            if extra:
                notes.append(f"{row.model} {row.dtype} / {row.compiler}: {extra}")
    return lines, notes


def _warm_compile(row: Row) -> float | None:
    """The warm first call minus the run it includes (None when either is unknown)."""
    if row.warm_compile_s is None or row.warm_run_s is None:
        return None
    return max(0.0, row.warm_compile_s - row.warm_run_s)


def table(rows: list[Row]) -> str:
    """Rows grouped by model, one line per compiler; failures say what failed (notes)."""
    lines, notes = _cells(rows)
    widths = [max([len(c)] + [len(line[i]) for line in lines]) for i, c in enumerate(COLUMNS)]
    out = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)).rstrip(),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines]
    if notes:
        out += ["", "notes:"] + [f"  {n}" for n in notes]
    return "\n".join(out)


def markdown_table(rows: list[Row]) -> str:
    """The same table as Markdown (for docs/benchmarks.md), notes as a list below."""
    lines, notes = _cells(rows)
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    if notes:
        out += [""] + [f"- {n}" for n in notes]
    return "\n".join(out)


DYNAMIC_TARGET = 1.10
"""The issue's target: a ``dynamic=True`` compile within 10% of the static compile's time."""


def _dynamic_cells(rows: list[Row]) -> tuple[list[str], list[list[str]], str]:
    """Columns, one line per dynamic row, and the summary line of the dynamic table."""
    columns = ["model", "dtype", "compiler", "static", "dynamic", "dynamic/static", "target"]
    lines: list[list[str]] = []
    met = measured = 0
    for row in rows:
        if not row.dynamic:
            continue
        ratio = row.dynamic_ratio
        if ratio is None or row.time_ms is None:
            failed = row.status == "fail_to_run"
            static_ms = None
            verdict = f"FAILED ({row.error.split(':')[0]})" if failed else "no static time"
        else:
            static_ms = row.time_ms / ratio
            measured += 1
            met += ratio <= DYNAMIC_TARGET
            verdict = "met" if ratio <= DYNAMIC_TARGET else f"{(ratio - 1) * 100:.0f}% slower"
        lines.append([row.model, row.dtype, row.compiler, format_time(static_ms), format_time(row.time_ms),
                      _fmt(ratio, ".2f", "x"), verdict])
    total = sum(row.dynamic for row in rows)
    summary = (f"{met} of {total} dynamic compiles within {(DYNAMIC_TARGET - 1) * 100:.0f}% "
               f"of the static compile ({total - measured} not measured)")
    return columns, lines, summary


def dynamic_table(rows: list[Row]) -> str:
    """Each ``dynamic=True`` row's time beside its compiler's static time, the ratio and
    whether it meets :data:`DYNAMIC_TARGET`; a summary line below."""
    columns, lines, summary = _dynamic_cells(rows)
    return _text_table(columns, lines) + "\n" + summary


def _sweep_cells(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    sizes = sorted({size for row in rows for size in row.sweep_ms})
    columns = ["model", "dtype", "compiler"] + [f"batch {s}" for s in sizes] + ["compiles"]
    lines = []
    for row in rows:
        if not row.sweep_ms:
            continue
        cells = []
        for size in sizes:
            value = row.sweep_ms.get(size)
            cells.append(format_time(value) if not isinstance(value, str) else "FAILED")
        lines.append([row.model, row.dtype, row.compiler, *cells,
                      _fmt(row.sweep_compiles, "d")])
    return columns, lines


def sweep_table(rows: list[Row]) -> str:
    """The size sweep: each variant's median time per batch size and the compiles the
    sweep caused; the errors of failed sizes as notes."""
    columns, lines = _sweep_cells(rows)
    notes = [f"  {row.model} {row.dtype} / {row.compiler} at batch {size}: {value}"
             for row in rows for size, value in row.sweep_ms.items() if isinstance(value, str)]
    return _text_table(columns, lines) + ("\n\nnotes:\n" + "\n".join(notes) if notes else "")


def _text_table(columns: list[str], lines: list[list[str]]) -> str:
    widths = [max([len(c)] + [len(line[i]) for line in lines]) for i, c in enumerate(columns)]
    out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip(),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines]
    return "\n".join(out)


def _markdown(columns: list[str], lines: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            + ["| " + " | ".join(line) + " |" for line in lines])


# The cold-compile phases shown per Ember row (the stage profile's top-level phases and
# the inductor's steps; ember.runtime.phases) and their column labels, then the build
# counts.
PHASE_COLUMNS = {"total": "total", "capture": "capture", "program cache": "cache",
                 "aot": "aot", "inductor": "inductor", "inductor/lowering": "lowering",
                 "inductor/scheduling": "schedule", "inductor/codegen": "codegen",
                 "inductor/kernel builds": "builds", "runtime load": "load"}
COUNT_COLUMNS = ("cpp builds", "triton builds", "deduped kernels", "build threads")


def phases_table(rows: list[Row]) -> str:
    """The cold compile of each Ember row, phase by phase (seconds), with its kernel
    build counts; empty when no row has phases (``--no-cold``, no Ember)."""
    shown = [r for r in rows if r.cold_phases]
    if not shown:
        return ""
    header = f"  {'model':<18} " + " ".join(f"{n:>9}" for n in PHASE_COLUMNS.values())
    lines = [header + "  counts"]
    for r in shown:
        cells = " ".join(f"{r.cold_phases.get(c, 0.0):9.2f}" for c in PHASE_COLUMNS)
        counts = ", ".join(f"{c} {int(r.cold_phases[f'#{c}'])}" for c in COUNT_COLUMNS
                           if f"#{c}" in r.cold_phases)
        lines.append(f"  {r.model[:18]:<18} {cells}  {counts}")
    return "\n".join(lines)


def overhead_table(results: dict[str, float | str]) -> str:
    """``compiler: N us per call`` lines."""
    return "\n".join(
        f"  {name:<20} {value:8.1f} us/call" if isinstance(value, float)
        else f"  {name:<20} FAILED: {value}"
        for name, value in results.items()
    )


def write_json(path: str | Path, meta: dict[str, Any], rows: list[Row],
               overhead: dict[str, float | str]) -> None:
    """Write the run: ``{"meta": ..., "rows": [...], "overhead_us": {...}}`` (non-finite
    floats as strings, so the file is strict JSON)."""
    payload = {
        "meta": meta,
        "rows": [dataclasses.asdict(r) for r in rows],
        "overhead_us": overhead,
    }
    Path(path).write_text(json.dumps(json_safe(payload), indent=2) + "\n")


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float as its text (JSON has no inf or nan)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def write_markdown(path: str | Path, meta: dict[str, Any], rows: list[Row],
                   overhead: dict[str, float | str]) -> None:
    """Write the run as a Markdown section: command, environment, table, overhead."""
    env = ", ".join(f"{k} {meta[k]}" for k in ("python", "torch", "triton") if k in meta)
    lines = [
        f"Command: `{meta.get('command', '')}`",
        "",
        (f"Date: {meta.get('date', '?')}; {env}; device: {meta.get('device', '?')}; "
         f"OMP_NUM_THREADS={meta.get('omp_num_threads', 'unset')}; suite {meta.get('suite')}, "
         f"{meta.get('mode')}; run time {meta.get('wall_s', '?')} s."),
        "",
        markdown_table(rows),
        "",
        "Per-call overhead (one-element tensor):",
        "",
    ]
    lines += [
        f"- {name}: {value:.1f} us" if isinstance(value, float) else f"- {name}: FAILED {value}"
        for name, value in overhead.items()
    ]
    if any(row.dynamic for row in rows):
        columns, cells, summary = _dynamic_cells(rows)
        lines += ["", "Dynamic (`dynamic=True`) against static compiles:", ""]
        lines += _markdown(columns, cells) + ["", summary]
    if any(row.sweep_ms for row in rows):
        columns, cells = _sweep_cells(rows)
        lines += ["", "Batch-size sweep (median time per size; compiles the sweep caused):", ""]
        lines += _markdown(columns, cells)
    Path(path).write_text("\n".join(lines) + "\n")
