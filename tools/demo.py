"""Ember in one command: compile a few bundled models, compare with eager and
torch.compile, and save a compiled artifact.

    python tools/demo.py [--device cpu|cuda] [--models pointwise,mlp,gpt] [--artifact PATH]

Prints, per model, the median time of eager, Ember and torch.compile, the speedup over
eager and the accuracy against an fp64 reference (docs/architecture.md). Ember's backends are
tried best first (inductor, aot_eager, eager): when one fails on a model the demo says
so and falls back to the next. Then it saves one compiled program as an ``.ember`` file
and shows that ``python -m ember.runtime show FILE`` reads it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import zoo
from benchlib import compilers, runner

BACKENDS_BEST_FIRST = ("inductor", "aot_eager", "eager")
DEMO_MODELS = "pointwise,mlp,gpt"
SHOWN_LINES = 20
WIDTH = 150


def bench_with_fallback(name: str, device: torch.device, suite: str = "quick"
                        ) -> tuple[list[runner.Row], str | None]:
    """Rows for eager, torch and the best Ember backend that works on ``name``; and that
    backend (``None`` when none works)."""
    def config(backend: str) -> runner.BenchConfig:
        return runner.BenchConfig(device, torch.float32, suite, ember_backend=backend,
                                  cold=False)

    rows = runner.bench_model(name, config(BACKENDS_BEST_FIRST[0]), ["eager", "torch", "ember"])
    eager_ms = rows[0].time_ms
    for i, backend in enumerate(BACKENDS_BEST_FIRST):
        ember = rows[-1] if i == 0 else runner.bench_model(name, config(backend), ["ember"])[0]
        if ember.status != "fail_to_run":
            if eager_ms and ember.time_ms:
                ember.speedup = eager_ms / ember.time_ms
            return rows[:-1] + [ember], backend
        following = BACKENDS_BEST_FIRST[i + 1] if i + 1 < len(BACKENDS_BEST_FIRST) else None
        print(f"  {name}: Ember backend {backend!r} failed ({ember.error})"
              + (f"; falling back to {following!r}" if following else ""), flush=True)
    return rows[:-1] + [ember], None


def _cell(row: runner.Row) -> str:
    if row.status == "fail_to_run":
        return "FAILED"
    speed = f" {row.speedup:.2f}x" if row.speedup else ""
    return f"{row.time_ms:.3f} ms{speed} {row.accuracy} (max err {row.max_abs_error:.1e})"


def print_table(results: list[tuple[str, list[runner.Row], str | None]]) -> None:
    header = ["model", "eager", "Ember", "torch.compile"]
    lines = []
    for name, rows, backend in results:
        by = {r.compiler.split("[")[0]: r for r in rows}
        ember = _cell(by["ember"]) + (f" [{backend}]" if backend else "")
        lines.append([name, _cell(by["eager"]).split(" 1.00x")[0], ember, _cell(by["torch"])])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for line in lines:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)))
    for name, rows, _ in results:
        for row in rows:
            if row.error or row.accuracy_detail:
                print(f"  note: {name} / {row.compiler}: {row.error or row.accuracy_detail}")


def compiled_program(name: str, device: torch.device, backend: str) -> Any:
    """The Ember program compiled for zoo model ``name``: the compiled callable's
    ``.program`` when it exposes one, else capture + the runtime's pipeline."""
    import ember.frontend
    from ember.runtime.pipeline import compile_program

    module, inputs = zoo.get(name).make(device, torch.float32, "quick")
    compiled = compilers.compile_fn("ember", module, backend)
    with torch.no_grad():
        compiled(*inputs)
    program = getattr(compiled, "program", None)
    if program is None:
        program = compile_program(ember.frontend.capture(module, *inputs), backend).program
    return program


def save_and_show(program: Any, path: Path) -> None:
    """Save ``program`` and print the first lines of ``python -m ember.runtime show``."""
    from ember.runtime.ir import save

    path.parent.mkdir(parents=True, exist_ok=True)
    save(program, path)
    print(f"saved {path} ({path.stat().st_size / 1024:.0f} KiB); "
          f"python -m ember.runtime show {path}:")
    shown = subprocess.run([sys.executable, "-m", "ember.runtime", "show", str(path)],
                           capture_output=True, text=True, check=False)
    text = shown.stdout if shown.returncode == 0 else shown.stderr
    lines = text.splitlines()
    # The weights are declared first, one line each; show the graph instead.
    tensors = [line for line in lines if line.startswith("tensor ")]
    rest = [line for line in lines if not line.startswith("tensor ")]
    if tensors:
        print(f"  | ({len(tensors)} tensor declarations, e.g. {tensors[0]!r})")
    for line in rest[:SHOWN_LINES]:
        print("  | " + (line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."))
    if len(rest) > SHOWN_LINES:
        print(f"  | ... ({len(rest) - SHOWN_LINES} more lines)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        choices=("cpu", "cuda"))
    parser.add_argument("--models", default=DEMO_MODELS)
    parser.add_argument("--artifact", type=Path,
                        default=Path(tempfile.gettempdir()) / "ember-demo" / "model.ember")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    print(f"Ember demo on {args.device}: torch {torch.__version__}; models {args.models} "
          "(quick sizes, inference, float32)\n", flush=True)
    results = []
    for name in args.models.split(","):
        print(f"compiling {name} ...", flush=True)
        rows, backend = bench_with_fallback(name, device)
        results.append((name, rows, backend))
    print()
    print_table(results)
    print()
    working = [(name, backend) for name, _, backend in results if backend]
    if not working:
        print("no Ember backend compiled any model: no artifact to save")
        return 1
    # Show the most compiled artifact: the model compiled by the best backend.
    name, backend = min(working, key=lambda w: BACKENDS_BEST_FIRST.index(w[1]))
    try:
        save_and_show(compiled_program(name, device, backend), args.artifact)
    except Exception as exc:  # noqa: BLE001 - the demo reports, never crashes
        print(f"could not save an artifact of {name} [{backend}]: {runner.describe(exc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
