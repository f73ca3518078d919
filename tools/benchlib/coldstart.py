"""Cold and warm compile time, measured in a fresh subprocess.

Cold: a new Python process whose cache directories (``EMBER_CACHE_DIR``,
``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``) point into a new, empty temporary
directory; the time of the first call (compile + one run, imports of the compiler
included). Warm: a second new process over the same, now filled, cache directories —
what a user sees when restarting a job.

What is timed, in both: ``import ember.frontend`` (or torch.compile's own lazy imports),
the ``compile`` call and the first call of the compiled model, run to completion (one
run of the model included). Not timed ("process start"): the interpreter's start,
``import torch``, building the model and its inputs, and one eager run of the model
before the timer: torch's own first-use setup (oneDNN's convolution primitives, the
autograd engine's threads; 0.2 s for the quick ResNet on the CPU machine) is paid by
every process that runs the model, compiled or not, and is no compile time. The
worker also reports the CPU time of the timed part (``first_call_cpu_s``; the warm
one as ``warm_cpu_s``): on a shared machine it varies far less than wall time; and the
time of a second call (``second_call_s``; ``run_s``), the run alone, which a model whose
own run is slow (or varies between processes) adds to its first call. The bench's
``warm-run`` column is the warm first call minus that run: the warm compile itself,
which issue #17's warm target is about. The
workers write Python bytecode
(``PYTHONDONTWRITEBYTECODE`` is dropped for them), so the warm process imports Ember
from ``.pyc`` files, as an installed package does: otherwise each warm start would
compile Ember's sources again (about 0.4 s on the CPU machine), which no restarted job
of a user pays.

The worker runs as ``python -m benchlib.coldstart JSON`` (``tools/`` on ``sys.path``); its
last stdout line is ``{"first_call_s": ..., "first_call_cpu_s": ..., "second_call_s": ...,
"phases": {...}}`` or ``{"error": ...}``;
``phases`` (Ember only) sums the stage profiles of the compiles of the first call
(``ember.runtime.phases``: seconds by phase, counts).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TOOLS_DIR = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class ColdJob:
    """One (model, compiler) compile-time measurement; ``dynamic``: compiled with
    ``dynamic=True``."""

    model: str
    compiler: str
    ember_backend: str
    device: str
    dtype: str
    suite: str
    train: bool
    mode: str | None = None
    ember_options: dict[str, Any] = field(default_factory=dict)
    dynamic: bool = False


def measure(job: ColdJob, timeout_s: float = 600.0) -> dict[str, object]:
    """Cold then warm compile time of ``job``: ``{"cold_s", "warm_s", "warm_cpu_s",
    "run_s", "cold_phases"}`` or ``{"error": "..."}`` (a failure never raises)."""
    with tempfile.TemporaryDirectory(prefix="ember-cold-") as tmp:
        env = worker_env(Path(tmp))
        cold = _run_worker(job, env, timeout_s)
        if "error" in cold:
            return cold
        warm = _run_worker(job, env, timeout_s)
        if "error" in warm:
            return {"error": f"warm: {warm['error']}"}
    return {"cold_s": cold["first_call_s"], "warm_s": warm["first_call_s"],
            "warm_cpu_s": warm.get("first_call_cpu_s"), "run_s": warm.get("second_call_s"),
            "cold_phases": cold.get("phases", {})}


def worker_env(tmp: Path) -> dict[str, str]:
    """The environment of the cold and warm workers: this one's, with every cache
    directory under ``tmp``, ``tools/`` importable and bytecode written (module
    docstring)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["EMBER_CACHE_DIR"] = str(tmp / "ember")
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "inductor")
    env["TRITON_CACHE_DIR"] = str(tmp / "triton")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(TOOLS_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _run_worker(job: ColdJob, env: dict[str, str], timeout_s: float) -> dict[str, object]:
    cmd = [sys.executable, "-m", "benchlib.coldstart", json.dumps(asdict(job))]
    try:
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"TimeoutExpired: compile took over {timeout_s:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"subprocess exited {proc.returncode}: {tail}"}
    try:
        result: dict[str, object] = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"error": f"unreadable subprocess output: {lines[-1][:200]}"}
    return result


def _first_call_seconds(job: ColdJob, around: Callable[[], AbstractContextManager[object]]
                        = contextlib.nullcontext) -> tuple[float, float, float]:
    """Wall and CPU seconds of compiling ``job``'s model and its first call, and the
    wall seconds of a second call (the run alone); ``around``: a context the timed part
    runs in (a profiler: ``tools/gpu/warm_start.py``)."""
    import torch
    import zoo

    from benchlib import compilers
    from benchlib.runner import make_step
    from benchlib.timing import synchronize

    device = torch.device(job.device)
    module, inputs = zoo.get(job.model).make(device, getattr(torch, job.dtype), job.suite)
    make_step("eager", module, inputs, job.train, job.ember_backend)()  # module docstring
    synchronize(device)
    compilers.reset(job.compiler)
    with around():
        start, cpu_start = time.perf_counter(), time.process_time()
        step = make_step(job.compiler, module, inputs, job.train, job.ember_backend,
                         job.mode, job.ember_options, True if job.dynamic else None)
        step()
        synchronize(device)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    start = time.perf_counter()
    step()
    synchronize(device)
    return wall, cpu, time.perf_counter() - start


def _ember_phases() -> dict[str, float]:
    """The phases (seconds) and counts of every Ember compile in this process, summed."""
    from ember.runtime.phases import compile_profiles

    total: dict[str, float] = {}
    for profile in compile_profiles():
        total["total"] = total.get("total", 0.0) + profile.total_s
        for name, timing in profile.phases.items():
            total[name] = total.get(name, 0.0) + timing.seconds
        for name, n in profile.counts.items():
            total[f"#{name}"] = n if name == "build threads" else total.get(f"#{name}", 0) + n
    return total


def _worker(job: ColdJob) -> dict[str, object]:
    try:
        seconds, cpu_seconds, run_seconds = _first_call_seconds(job)
        found: dict[str, object] = {"first_call_s": seconds, "first_call_cpu_s": cpu_seconds,
                                    "second_call_s": run_seconds}
        if job.compiler == "ember":
            found["phases"] = _ember_phases()
        return found
    except Exception as exc:  # noqa: BLE001 - report, never crash: the parent prints the row
        first = (str(exc).strip().splitlines() or [""])[0]
        return {"error": f"{type(exc).__name__}: {first}"}


if __name__ == "__main__":
    print(json.dumps(_worker(ColdJob(**json.loads(sys.argv[1])))))
