"""The OpInfo sweep: every OpInfo of torch's ``op_db`` through Ember's default backend.

    python tools/opinfo_sweep.py [--ops add,median,...] [--dtypes float32,bfloat16,int64]
        [--no-grad] [--samples 2] [--jobs 2] [--out report.csv] [--failures FILE]
        [--rerun-failing OLD.csv]

Runs at most ``--samples`` samples per (op, dtype, kind) (forward in each dtype the op
supports, gradients in float32 for differentiable ops), in ``--jobs`` worker processes
(an op that kills its worker, e.g. with a signal, is recorded as a crash and the worker
restarts after it), then prints the per-category counts, the fallback ops and the
failing samples. The harness and the categories: ``integration_tests/opinfo/opinfo_harness.py``.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_HARNESS = Path(__file__).resolve().parent.parent / "integration_tests" / "opinfo"
sys.path.insert(0, str(_HARNESS))

import opinfo_harness as harness  # noqa: E402

_DTYPES = {"float32": harness.torch.float32, "bfloat16": harness.torch.bfloat16,
           "int64": harness.torch.int64}
_STALL_SECONDS = 600.0  # a worker silent this long on one op is killed (a hang)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default="", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--dtypes", default="float32,bfloat16,int64",
                        help="forward dtypes among " + ", ".join(_DTYPES))
    parser.add_argument("--no-grad", action="store_true", help="skip the gradient samples")
    parser.add_argument("--samples", type=int, default=2,
                        help="samples per (op, dtype, kind) (default 2)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--out", type=Path, help="write every sample's row to this CSV")
    parser.add_argument("--failures", type=Path,
                        help="write the failing samples (op, dtype, kind, error) to this file")
    parser.add_argument("--rerun-failing", type=Path, metavar="OLD_CSV",
                        help="re-run only the ops that failed in an earlier --out CSV and "
                             "report that CSV's rows with theirs replaced")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = [d for d in args.dtypes.split(",") if d not in _DTYPES]
    if unknown:
        parser.error(f"unknown dtype(s) {', '.join(unknown)}; known: {', '.join(_DTYPES)}")
    dtypes = [_DTYPES[d] for d in args.dtypes.split(",")]
    names = [n for n in args.ops.split(",") if n]
    if args.worker is not None:
        return _work(names, dtypes, not args.no_grad, args.samples, args.worker)
    earlier: list[harness.SampleResult] = []
    if args.rerun_failing is not None:
        earlier = read_csv(args.rerun_failing)
        names = sorted({r.op for r in harness.failures(earlier)})
        if not names:
            print(f"no failing samples in {args.rerun_failing}")
            return 0
    labels = [harness.op_label(o) for o in harness.select_ops(names, exact=bool(earlier))]
    start = time.perf_counter()
    results = _sweep(labels, args, max(args.jobs, 1))
    elapsed = time.perf_counter() - start
    if earlier:
        rerun = set(labels)
        results = [r for r in earlier if r.op not in rerun] + results
    if args.out is not None:
        write_csv(results, args.out)
    report = render(results, elapsed)
    print(report)
    if args.failures is not None:
        args.failures.parent.mkdir(parents=True, exist_ok=True)
        args.failures.write_text(render_failures(results))
    return 0


def _work(names: list[str], dtypes: list[harness.torch.dtype], grad: bool, samples: int,
          out: Path) -> int:
    """Worker: run ``names`` in order, appending a ``start`` line before each op and one
    line per sample to ``out`` (JSON lines)."""
    ops = harness.select_ops(names, exact=True)
    with out.open("a") as f:
        for opinfo in ops:
            f.write(json.dumps({"start": harness.op_label(opinfo)}) + "\n")
            f.flush()
            for result in harness.run_opinfo(opinfo, samples, dtypes, grad):
                f.write(json.dumps(result.row()) + "\n")
                f.flush()
    return 0


def _sweep(labels: list[str], args: argparse.Namespace, jobs: int) -> list[harness.SampleResult]:
    chunks = [labels[i::jobs] for i in range(jobs)]
    results: list[harness.SampleResult] = []
    with tempfile.TemporaryDirectory(prefix="opinfo-sweep-") as tmp:
        running = [_Worker(chunk, Path(tmp) / f"w{i}.jsonl", args)
                   for i, chunk in enumerate(chunks) if chunk]
        while running:
            time.sleep(1.0)
            for worker in list(running):
                if worker.poll():
                    running.remove(worker)
                    results.extend(worker.results)
    return results


class _Worker:
    """A worker process over ``labels``, restarted after an op that kills it."""

    def __init__(self, labels: list[str], path: Path, args: argparse.Namespace) -> None:
        self.remaining = list(labels)
        self.path = path
        self.args = args
        self.results: list[harness.SampleResult] = []
        self.read = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.last_progress = time.monotonic()
        self._in_progress: str | None = None
        self._launch()

    def _launch(self) -> None:
        command = [sys.executable, __file__, "--worker", str(self.path),
                   "--ops", ",".join(self.remaining), "--dtypes", self.args.dtypes,
                   "--samples", str(self.args.samples)]
        if self.args.no_grad:
            command.append("--no-grad")
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        self.last_progress = time.monotonic()

    def _collect(self) -> str | None:
        """Read new lines; return the op in progress (started, not yet known finished)."""
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        current = None
        for line in lines[self.read:]:
            row = json.loads(line)
            if "start" in row:
                if current is not None:
                    self.remaining.remove(current)
                current = row["start"]
            else:
                self.results.append(harness.SampleResult.from_row(row))
        if len(lines) > self.read:
            self.last_progress = time.monotonic()
        self.read = len(lines)
        return current

    def poll(self) -> bool:
        """Advance; True when every op is done."""
        assert self.process is not None
        current = self._collect()
        if current is not None:
            self._in_progress = current
        code = self.process.poll()
        stalled = time.monotonic() - self.last_progress > _STALL_SECONDS
        if code is None and not stalled:
            return False
        if code is None:
            self.process.kill()
            self.process.wait()
        if code == 0:
            return True
        op = self._in_progress
        why = f"timed out after {_STALL_SECONDS:.0f} s" if stalled else f"worker died ({code})"
        if op is not None and op in self.remaining:
            self.results.append(harness.SampleResult(op, "?", "?", -1, "crash", why))
            done_until = self.remaining.index(op) + 1
            self.remaining = self.remaining[done_until:]
        if not self.remaining:
            return True
        self._in_progress = None
        self._launch()
        return False


def read_csv(path: Path) -> list[harness.SampleResult]:
    """The rows of a CSV written by :func:`write_csv`."""
    with path.open(newline="") as f:
        return [harness.SampleResult.from_row(row) for row in csv.DictReader(f)]


def write_csv(results: list[harness.SampleResult], path: Path) -> None:
    """One row per sample."""
    rows = [r.row() for r in results]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["op"])
        writer.writeheader()
        writer.writerows(rows)


def render(results: list[harness.SampleResult], elapsed: float) -> str:
    """Per-category figures, the fallback ops and the failing samples, as text."""
    summary = harness.summarize(results)
    ops = len({r.op for r in results})
    lines = [f"OpInfo sweep: {ops} OpInfos, {summary.total} samples "
             f"({summary.skipped} skipped: eager rejects them) in {elapsed:.0f} s"]
    for category in harness.CATEGORIES:
        n = summary.counts[category]
        share = 100.0 * n / summary.total if summary.total else 0.0
        lines.append(f"  {category:<11}{n:>6}  {share:5.1f}%")
    lines.append(f"  correct    {100.0 * summary.correct_fraction:5.1f}%")
    lines.append(f"fallback ops ({len(summary.fallback_ops)}; samples using each):")
    lines += [f"  {op}: {n}" for op, n in summary.fallback_ops.items()]
    lines.append("failing samples:")
    lines.append(render_failures(results).rstrip())
    return "\n".join(lines)


def render_failures(results: list[harness.SampleResult]) -> str:
    """``op dtype kind #index category: error`` per failing sample."""
    return "".join(f"{r.op} {r.dtype} {r.kind} #{r.index} {r.category}: {r.detail}\n"
                   for r in harness.failures(results))


if __name__ == "__main__":
    sys.exit(main())
