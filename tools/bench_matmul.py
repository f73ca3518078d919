"""The matmul suite of issue #16: GEMMs, GEMM + bias + GELU, the MLP block and hand-written
attention, compiled by eager, torch.compile (default and max-autotune) and Ember (default
and max-autotune-no-cudagraphs) side by side in one process.

    python tools/bench_matmul.py [--device cpu|cuda] [--dtype bfloat16] \\
        [--scale test|quick|full] [--families gemm,mlp:8192x768] \\
        [--compilers eager,torch,torch-max-autotune,ember,ember-max-autotune] \\
        [--no-warm] [--cache-dir DIR] [--time-limit S] [--json OUT] [--markdown OUT]

(``python tools/bench.py --suite matmul ...`` runs the same, with the same options.)

Defaults: on CUDA bfloat16 and the issue's shapes (``--scale full``); on CPU float32 and
CPU-sized shapes (``--scale quick``). Per workload: each variant's first call (compile
time), its accuracy against eager in the workload's dtype (and fp64), its median time;
speeds as the other variant's time over the row's; then the issue's targets, met or not.
A one-element compile with each compiler first pays what a process pays once (imports,
the first compile of anything), so compile times are the workloads' own. ``--json`` and
``--markdown`` are rewritten after every workload (a run stopped from outside keeps them). Autotuning variants also get their compile time with a warm autotune cache, in a fresh
subprocess (``benchlib/matmul_warm.py``). Each workload and variant compiles with caches
of its own (Ember's, inductor's and Triton's) that start empty, under ``--cache-dir`` or a
temporary directory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from benchlib import compilers, matmul, matmul_report, matmul_runner, matmul_warm, report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default=None,
                        help="float32, float16 or bfloat16 (default: bfloat16 on CUDA, "
                             "float32 on CPU)")
    parser.add_argument("--scale", default=None, choices=matmul.SCALES,
                        help="the shapes: full (the issue's, for an H200), quick (CPU, "
                             "seconds), test (tiny); default full on CUDA, quick on CPU")
    parser.add_argument("--families", default="",
                        help="comma-separated: a family (its shapes at --scale) or "
                             "family:SHAPE (gemm:4096x4096x4096), of "
                             + ",".join(f.name for f in matmul.FAMILIES))
    parser.add_argument("--compilers", default=",".join(v.name for v in matmul_runner.VARIANTS),
                        help="comma-separated variants (compiler and mode), of "
                             + ",".join(v.name for v in matmul_runner.VARIANTS))
    parser.add_argument("--ember-backend", default="inductor", choices=compilers.EMBER_BACKENDS)
    parser.add_argument("--no-warm", action="store_true",
                        help="skip the warm-autotune-cache compile times (subprocesses)")
    parser.add_argument("--cache-dir", metavar="DIR", default=None,
                        help="keep each workload and variant's caches in a new folder "
                             "in DIR (default: a temporary directory, removed at the end)")
    parser.add_argument("--time-limit", type=float, default=900.0, metavar="S",
                        help="seconds allowed per phase of a workload (default 900)")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    parser.add_argument("--markdown", metavar="OUT",
                        help="also write the tables as Markdown (for docs/benchmarks.md)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    args.scale = args.scale or ("full" if args.device == "cuda" else "quick")
    dtype_name = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    args.torch_dtype = getattr(torch, dtype_name, None)
    if not isinstance(args.torch_dtype, torch.dtype) or not args.torch_dtype.is_floating_point:
        parser.error(f"unknown floating dtype {dtype_name!r}")
    names = [c.strip() for c in args.compilers.split(",") if c.strip()]
    for name in names:
        try:
            matmul_runner.variant(name)
        except KeyError as exc:
            parser.error(str(exc.args[0]))
    # In table order (eager first: the baseline of the speeds).
    args.variant_list = tuple(v.name for v in matmul_runner.VARIANTS if v.name in names)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    try:
        args.workload_list = matmul.workloads(args.scale, families)
    except KeyError as exc:
        parser.error(str(exc.args[0]))
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cache_dir:  # kept: a new folder in it, so the caches start empty
        Path(args.cache_dir).mkdir(parents=True, exist_ok=True)
        return _run(args, Path(tempfile.mkdtemp(prefix="run-", dir=args.cache_dir)))
    with tempfile.TemporaryDirectory(prefix="ember-bench-matmul-") as tmp:
        return _run(args, Path(tmp))


def _run(args: argparse.Namespace, cache_root: Path) -> int:
    device = torch.device(args.device)
    config = matmul_runner.MatmulConfig(device, args.torch_dtype, args.variant_list,
                                        args.time_limit, not args.no_warm,
                                        args.ember_backend, cache_root)
    rows: list[matmul_runner.MatmulRow] = []
    start = time.perf_counter()
    compiler_names = {matmul_runner.variant(name).compiler for name in args.variant_list}
    with matmul_warm.using_caches(matmul_warm.CacheDirs.under(cache_root / "warm-up")):
        for compiler, error in matmul_runner.warm_up(compiler_names, device).items():
            print(f"warm-up of {compiler} failed: {error}", file=sys.stderr, flush=True)
    meta = report.environment(device)
    meta.update(suite="matmul", scale=args.scale, dtype=str(args.torch_dtype),
                ember_backend=args.ember_backend)
    for done, work in enumerate(args.workload_list, 1):
        t0 = time.perf_counter()
        work_rows = matmul_runner.bench_workload(work, config)
        rows += work_rows
        states = ", ".join(f"{r.variant} {r.status}" for r in work_rows)
        print(f"[{time.perf_counter() - start:6.0f}s] {work.name}: {states} "
              f"({time.perf_counter() - t0:.0f}s)", file=sys.stderr, flush=True)
        # The files after every workload: a run stopped by an outer timeout keeps its rows.
        meta.update(wall_s=f"{time.perf_counter() - start:.0f}",
                    workloads_done=f"{done} of {len(args.workload_list)}")
        _write(args, meta, rows)
    print()
    print(" ".join(f"{k}={v}" for k, v in meta.items() if k != "command"))
    print(matmul_report.table(rows))
    print("\n" + matmul_report.LEGEND)
    print("\nissue #16 targets:")
    print(matmul_report.target_table(matmul_report.targets(rows)))
    for path in (args.json, args.markdown):
        if path:
            print(f"wrote {path}")
    return 0


def _write(args: argparse.Namespace, meta: dict[str, str],
           rows: list[matmul_runner.MatmulRow]) -> None:
    if args.json:
        matmul_report.write_json(args.json, meta, rows)
    if args.markdown:
        matmul_report.write_markdown(args.markdown, meta, rows)

if __name__ == "__main__":
    sys.exit(main())
