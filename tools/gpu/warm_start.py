"""Where a warm start's time goes: a cold process fills the caches, then warm processes
over them are timed, one of them under cProfile.

    python tools/gpu/warm_start.py MODELS [DTYPE] [infer|train] [ROWS] [triton]
    SCRIPT_ARGS="tools/gpu/warm_start.py hf_bert,tv_resnet18 bfloat16 train" \\
        bash tools/gpu/h200_all.sh script

For each zoo model (full suite on CUDA, quick on the CPU) and Ember: the cold first call,
three warm first calls (``benchlib.coldstart``: ``import ember.frontend``, compile and
the first call, in a fresh process; process start excluded), the Triton binaries the
warm process stored and loaded (``ember.runtime.compiled.triton_stored.stats``: a warm
start should load every binary and store none) and the ``ROWS`` (default 25) functions
of a profiled warm first call with the most cumulative time. Issue #17's target: a warm
compile of at most 0.3 s.

``ROWS`` = ``timers``: no profiler (cProfile inflates the many small calls of decoding
several-fold); instead one more warm process times the warm path's parts with
``perf_counter`` (:data:`TIMED`: seconds and calls of each, nested parts included in
their callers) and the garbage collector's pauses. Installing the timers imports most of
Ember's warm path before the timer starts (``imports_before_timer_s`` in the report), so
the timed first call is that much shorter than the plain warm ones.

``triton``: every process binds its Triton binaries with Triton's own launcher
(``EMBER_TORCH_LAUNCHER=0``), the cold one included; by default they go through torch's
C++ launcher where a binary allows it (no Triton module load or launcher per kernel).
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import json
import pstats
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

TOOLS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TOOLS))

from benchlib.coldstart import ColdJob, worker_env  # noqa: E402


#: (module, attribute path) of the functions a ``timers`` run times
TIMED = [
    ("ember.frontend.capture_cache", "CaptureCache._entries"),
    ("ember.frontend.capture_cache", "CaptureCache._segment"),
    ("ember.frontend.bytecode.segment_run", "Segment.match"),
    ("ember.runtime.cache.program_cache", "load_entry"),
    ("ember.runtime.callable", "ProgramCallable.__init__"),
    ("ember.runtime.compiled.triton_kernel", "load_triton_kernel"),
    ("ember.runtime.compiled.triton_kernel", "_import_triton"),
    ("ember.runtime.compiled.triton_kernel", "jit_function_from_source"),
    ("ember.runtime.compiled.triton_kernel", "TritonKernel._bind_prebuilt"),
    ("ember.runtime.compiled.triton_stored", "load"),
    ("ember.runtime.autograd", "_run_backward"),
    ("ember.frontend.guards", "compile_matcher"),
    ("ember.runtime.compiled.code_cache", "cached_code"),
    ("ember.runtime.compiled.loader", "load_executor"),
]


def _install_timers() -> tuple[dict[str, list[float]], float]:
    """Wrap each :data:`TIMED` function (and the garbage collector) with a timer;
    returns name -> [seconds, calls], filled as they run, and the seconds spent importing
    the timed modules (before the timer starts: a plain warm process imports them inside
    it)."""
    import gc
    import importlib
    import time

    totals: dict[str, list[float]] = {}

    def wrap(owner: object, attr: str, name: str) -> None:
        real = getattr(owner, attr)
        cell = totals.setdefault(name, [0.0, 0])

        def timed(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                cell[0] += time.perf_counter() - start
                cell[1] += 1

        setattr(owner, attr, timed)
        # a module that imported the function by name keeps its own reference
        for module in list(sys.modules.values()):
            if (getattr(module, "__name__", "").startswith("ember.")
                    and getattr(module, attr, None) is real):
                setattr(module, attr, timed)

    import torch  # noqa: F401 - process start, as in every warm process

    start = time.perf_counter()
    for module, path in TIMED:
        try:
            owner: object = importlib.import_module(module)
            *outer, attr = path.split(".")
            for part in outer:
                owner = getattr(owner, part)
            wrap(owner, attr, path)
        except (ImportError, AttributeError) as e:
            totals[f"{path} (not timed: {e})"] = [0.0, 0]
    imports_s = time.perf_counter() - start
    gc_cell = totals.setdefault("garbage collection", [0.0, 0])
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            gc_cell[0] += time.perf_counter() - started.pop()
            gc_cell[1] += 1

    gc.callbacks.append(on_gc)
    return totals, imports_s


def _worker(job: ColdJob, rows: int, static: bool) -> None:
    """One warm (or cold) process: its compile and first call timed, under cProfile
    when ``rows``; ``static``: binaries launched through torch's C++ launcher."""
    from benchlib.coldstart import _first_call_seconds

    if not static:
        from ember.runtime.config import config

        config.torch_launcher = False

    profile = cProfile.Profile()

    @contextlib.contextmanager
    def profiled() -> Iterator[None]:
        profile.enable()
        try:
            yield
        finally:
            profile.disable()

    timers, imports_s = _install_timers() if rows < 0 else (None, 0.0)

    @contextlib.contextmanager
    def timed() -> Iterator[None]:
        assert timers is not None
        for cell in timers.values():  # what model building and the eager run spent
            cell[:] = [0.0, 0]
        yield
        frozen.update({k: [round(v[0], 4), v[1]] for k, v in timers.items()})

    frozen: dict[str, list[float]] = {}
    around = profiled if rows > 0 else timed if rows < 0 else contextlib.nullcontext
    wall, cpu, run = _first_call_seconds(job, around)
    from ember.runtime.compiled import triton_stored, triton_warmed

    report = {"first_call_s": round(wall, 4), "cpu_s": round(cpu, 4), "run_s": round(run, 4),
              "stored": triton_stored.stats(), "warmed": triton_warmed.stats()}
    if timers is not None:
        report["timers"] = frozen
        report["imports_before_timer_s"] = round(imports_s, 4)
    if rows > 0:
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(rows)
        print(text.getvalue())
    print(json.dumps(report))


def _run(job: ColdJob, env: dict[str, str], rows: int, static: bool) -> dict[str, object]:
    cmd = [sys.executable, __file__, "--worker", json.dumps(job.__dict__), str(rows),
           "static" if static else "triton"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    *profile, last = proc.stdout.strip().splitlines()
    if rows > 0:
        print("\n".join(profile))
    found: dict[str, object] = json.loads(last)
    return found


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--worker":
        _worker(ColdJob(**json.loads(argv[1])), int(argv[2]), argv[3] == "static")
        return 0
    import torch

    models = argv[0].split(",") if argv else ["hf_bert"]
    dtype = argv[1] if len(argv) > 1 else "bfloat16"
    train = len(argv) > 2 and argv[2] == "train"
    rows = (-1 if argv[3] == "timers" else int(argv[3])) if len(argv) > 3 else 25
    static = not (len(argv) > 4 and argv[4] == "triton")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    suite = "full" if device == "cuda" else "quick"
    for model in models:
        job = ColdJob(model, "ember", "inductor", device, dtype, suite, train)
        with tempfile.TemporaryDirectory(prefix="ember-warm-") as tmp:
            env = worker_env(Path(tmp))
            cold = _run(job, env, 0, static)
            warm = [_run(job, env, 0, static) for _ in range(3)]
            launcher = "" if static else " (Triton's launcher)"
            print(f"== {model} {dtype} {'train' if train else 'infer'} on {device}{launcher}: "
                  f"cold {json.dumps(cold)}")
            for w in warm:
                print(f"   warm {json.dumps(w)}")
            last = _run(job, env, rows, static)
            if rows < 0:
                print(f"   timed {json.dumps(last)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
