"""Benchmark eager, torch.compile and Ember side by side on the model zoo.

    python tools/bench.py --device cpu --compilers eager,torch,ember --suite quick \\
        [--train] [--json OUT] [--markdown OUT] [--ember-backend eager|aot_eager|inductor] \\
        [--models a,b] [--dtype float32,bfloat16] [--mode reduce-overhead] \\
        [--ember-option capture=strict] [--no-cold] [--time-limit S] \\
        [--dynamic] [--sizes 1,8,32] [--busy N]
    python tools/bench.py --suite matmul [...]   # issue #16's suite: tools/bench_matmul.py

For each model, in one process: median time, speedup over eager, compile time (in this
process, and cold/warm in a fresh subprocess with empty caches unless ``--no-cold``),
accuracy against an fp64 reference (docs/architecture.md), peak memory (CUDA), graphs / graph
breaks / kernels / fallbacks as each compiler reports them; then the per-call overhead of
each compiler on a tiny function. A model's failure is recorded in its row; the run goes on.

``--dynamic`` compiles every compiler but eager a second time with ``dynamic=True`` (every
input dimension symbolic), timed in the same round-robin as the static compile, and reports
each dynamic/static time ratio (the target: within 10%). ``--sizes`` then also times every
compiled variant at those batch sizes (dimension 0 of every input) and counts the compiles
the new sizes caused.

``--busy N`` runs N busy-looping processes, each pinned to one of the bench's cores, for
the whole run (benchlib/busy.py): the shared-CPU case of issue #17. Times are then means,
not medians: call times split into fast and slow calls, and a median hides the slow.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import zoo
from benchlib import busy, compilers, report, runner


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        choices=("cpu", "cuda"))
    parser.add_argument("--compilers", default="eager,torch,ember",
                        help="comma-separated subset of " + ",".join(compilers.COMPILERS))
    parser.add_argument("--suite", default="quick", choices=zoo.SUITES + ("matmul",),
                        help="a zoo suite, or matmul: issue #16's matmul/attention suite "
                             "(tools/bench_matmul.py, which takes its own options)")
    parser.add_argument("--train", action="store_true",
                        help="time forward + backward + SGD step instead of inference")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    parser.add_argument("--markdown", metavar="OUT",
                        help="also write the table as Markdown (for docs/benchmarks.md)")
    parser.add_argument("--ember-backend", default="inductor", choices=compilers.EMBER_BACKENDS)
    parser.add_argument("--models", help="comma-separated model names (default: the suite)")
    parser.add_argument("--dtype", default="float32",
                        help="comma-separated: float32, float16, bfloat16 (rows per dtype)")
    parser.add_argument("--mode", default=None,
                        choices=("default", "reduce-overhead", "max-autotune",
                                 "max-autotune-no-cudagraphs"),
                        help="compile mode, passed to torch.compile and Ember alike")
    parser.add_argument("--ember-option", action="append", default=[], metavar="KEY=VALUE",
                        help="an Ember options= entry, e.g. capture=strict or strict=True; a value "
                             "that reads as a Python literal (True, 3) is one, any other is "
                             "a string (repeatable)")
    parser.add_argument("--no-cold", action="store_true",
                        help="skip the cold/warm compile-time subprocesses")
    parser.add_argument("--time-limit", type=float, default=900.0, metavar="S",
                        help="seconds allowed per phase of a model (compile; timing); "
                             "past it the row fails with PhaseTimeout (default 900)")
    parser.add_argument("--dynamic", action="store_true",
                        help="also compile each compiler with dynamic=True and report the "
                             "dynamic/static time ratios")
    parser.add_argument("--sizes", default="", metavar="N,N",
                        help="comma-separated batch sizes: time every compiled variant at "
                             "each (dim 0 of every input) and count the compiles they cause")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="run N busy-looping processes pinned beside the bench (one "
                             "per core, the last N cores) for the whole run")
    args = parser.parse_args(argv)
    try:
        busy.busy_cores(args.busy)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        args.size_list = tuple(int(n) for n in args.sizes.split(",") if n.strip())
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: expected comma-separated integers")
    if any(n < 1 for n in args.size_list):
        parser.error(f"--sizes {args.sizes!r}: batch sizes must be at least 1")
    args.compiler_list = [c.strip() for c in args.compilers.split(",") if c.strip()]
    for c in args.compiler_list:
        if c not in compilers.COMPILERS:
            parser.error(f"unknown compiler {c!r}; expected some of {compilers.COMPILERS}")
    if "eager" in args.compiler_list:  # eager first: the speedup baseline
        args.compiler_list.remove("eager")
        args.compiler_list.insert(0, "eager")
    args.model_list = args.models.split(",") if args.models else zoo.names(args.suite)
    for name in args.model_list:
        try:
            zoo.get(name)
        except KeyError as exc:
            parser.error(str(exc.args[0]))
    args.dtype_list = []
    for name in args.dtype.split(","):
        dtype = getattr(torch, name.strip(), None)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            parser.error(f"unknown floating dtype {name!r}")
        args.dtype_list.append(dtype)
    try:
        args.ember_options = compilers.parse_ember_options(args.ember_option)
    except ValueError as error:
        parser.error(str(error))
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    return args


def _matmul_suite_argv(argv: list[str]) -> list[str] | None:
    """``argv`` without ``--suite matmul`` when it asks for the matmul suite, else ``None``."""
    for i, arg in enumerate(argv):
        if arg == "--suite" and argv[i + 1:i + 2] == ["matmul"]:
            return argv[:i] + argv[i + 2:]
        if arg == "--suite=matmul":
            return argv[:i] + argv[i + 1:]
    return None


def main(argv: list[str] | None = None) -> int:
    matmul_argv = _matmul_suite_argv(sys.argv[1:] if argv is None else argv)
    if matmul_argv is not None:
        import bench_matmul

        return int(bench_matmul.main(matmul_argv))
    args = parse_args(argv)
    with busy.busy_processes(args.busy):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    device = torch.device(args.device)
    rows: list[runner.Row] = []
    start = time.perf_counter()
    for dtype in args.dtype_list:
        config = runner.BenchConfig(device, dtype, args.suite, args.train, args.ember_backend,
                                    cold=not args.no_cold, time_limit_s=args.time_limit,
                                    mode=args.mode, ember_options=args.ember_options,
                                    dynamic=args.dynamic, sizes=args.size_list,
                                    mean_time=args.busy > 0)
        for name in args.model_list:
            t0 = time.perf_counter()
            model_rows = runner.bench_model(name, config, args.compiler_list)
            rows += model_rows
            states = ", ".join(_progress(r) for r in model_rows)
            print(f"[{time.perf_counter() - start:6.0f}s] {name} ({dtype}): {states} "
                  f"({time.perf_counter() - t0:.0f}s)", file=sys.stderr, flush=True)
            # a run stopped by a time limit keeps the models it finished
            _write(args, _meta(args, device, start, partial=True), rows, {})
    overhead = runner.overhead(args.compiler_list, device, args.ember_backend, args.mode,
                               args.ember_options)
    meta = _meta(args, device, start)
    print()
    print(" ".join(f"{k}={v}" for k, v in meta.items() if k != "command"))
    print(report.table(rows))
    if args.dynamic:
        print("\ndynamic=True against the static compile:")
        print(report.dynamic_table(rows))
    if args.size_list:
        print("\nbatch-size sweep:")
        print(report.sweep_table(rows))
    phases = report.phases_table(rows)
    if phases:
        print("\nEmber's cold compile by phase (s; EMBER_LOGS=stages prints one table a compile):")
        print(phases)
    print("\nper-call overhead (tiny input):")
    print(report.overhead_table(overhead))
    for path in _write(args, meta, rows, overhead):
        print(f"wrote {path}")
    return 0


def _progress(row: runner.Row) -> str:
    """``"ember[inductor] ok 12.3ms 1.05x cold 9.1s"``: one compiler's result, as it lands."""
    parts = [row.compiler, row.status]
    if row.time_ms is not None:
        parts.append(f"{row.time_ms:.2f}ms")
    if row.speedup is not None:
        parts.append(f"{row.speedup:.2f}x")
    if row.cold_compile_s is not None:
        parts.append(f"cold {row.cold_compile_s:.1f}s")
    if row.warm_compile_s is not None:
        parts.append(f"warm {row.warm_compile_s:.2f}s")
    return " ".join(parts)


def _meta(args: argparse.Namespace, device: torch.device, start: float,
          partial: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = report.environment(device)
    meta.update(suite=args.suite, mode="train" if args.train else "inference",
                compile_mode=args.mode or "default", ember_backend=args.ember_backend,
                ember_options=",".join(args.ember_option) or "none",
                dynamic=str(args.dynamic), sizes=args.sizes or "none",
                busy=f"{args.busy} (cores {busy.busy_cores(args.busy)}, times are means)"
                if args.busy else "0",
                wall_s=f"{time.perf_counter() - start:.0f}")
    if partial:
        meta["partial"] = "yes: the models finished so far"
    return meta


def _write(args: argparse.Namespace, meta: dict[str, Any], rows: list[runner.Row],
           overhead: dict[str, float | str]) -> list[str]:
    """Write the JSON and Markdown files asked for; return their paths."""
    written = []
    if args.json:
        report.write_json(args.json, meta, rows, overhead)
        written.append(args.json)
    if args.markdown:
        report.write_markdown(args.markdown, meta, rows, overhead)
        written.append(args.markdown)
    return written


if __name__ == "__main__":
    sys.exit(main())
