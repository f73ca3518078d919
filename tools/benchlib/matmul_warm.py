"""Compile time with a warm autotune cache, measured in a fresh subprocess.

A ``max-autotune`` compile benchmarks its candidates once and stores each decision; a
later process with that cache compiles without benchmarking. To see that time alone, the
subprocess gets this run's *autotune* cache but empty *compiled-artifact* caches, so it
still compiles and builds every kernel, and only skips the benchmarking:

- Ember: a new, empty ``EMBER_CACHE_DIR`` holding a copy of the run's autotune folder
  (:data:`EMBER_AUTOTUNE_FOLDER` under the cache root); its kernel and program caches
  start empty.
- torch.compile: the run's ``TORCHINDUCTOR_CACHE_DIR`` (where inductor keeps its
  autotuning results) with its FX-graph and AOTAutograd caches turned off
  (``TORCHINDUCTOR_FX_GRAPH_CACHE=0``, ``TORCHINDUCTOR_AUTOGRAD_CACHE=0``), so it lowers
  and generates code again.
- Both: a new, empty ``TRITON_CACHE_DIR`` (every Triton kernel is compiled again).

The time is the workload's first call (compile + one run) in the subprocess, after a
one-element warm-up compile (imports and other once-per-process costs excluded). The worker
runs as ``python -m benchlib.matmul_warm JSON`` with ``tools/`` on ``sys.path``; its last
stdout line is ``{"first_call_s": ...}`` or ``{"error": ...}``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

TOOLS_DIR = Path(__file__).resolve().parent.parent

EMBER_AUTOTUNE_FOLDER = "autotune"
"""The folder of Ember's on-disk autotune cache under its cache root (``EMBER_CACHE_DIR``)."""

_CACHE_VARIABLES = ("EMBER_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


@dataclass(frozen=True)
class CacheDirs:
    """The cache directories of a bench run: Ember's root, torch inductor's, Triton's."""

    ember: Path
    inductor: Path
    triton: Path

    @staticmethod
    def under(root: Path) -> CacheDirs:
        """Three new directories under ``root`` (created, private to the user)."""
        dirs = CacheDirs(root / "ember", root / "inductor", root / "triton")
        for path in (dirs.ember, dirs.inductor, dirs.triton):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return dirs

    def environment(self) -> dict[str, str]:
        """The variables that point Ember, inductor and Triton at these directories."""
        return dict(zip(_CACHE_VARIABLES, (str(self.ember), str(self.inductor),
                                           str(self.triton))))


@contextlib.contextmanager
def using_caches(dirs: CacheDirs) -> Iterator[None]:
    """Point this process's Ember, inductor and Triton caches at ``dirs`` for the block
    (the environment variables, and Ember's ``cache_dir`` setting when Ember is already
    imported), then restore what was there. Only the cache directory of Ember's settings
    changes: settings a caller patched stay as they are."""
    saved = {name: os.environ.get(name) for name in _CACHE_VARIABLES}
    os.environ.update(dirs.environment())
    _sync_ember_cache_dir()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _sync_ember_cache_dir()


def _sync_ember_cache_dir() -> None:
    """Ember's ``config.cache_dir`` as ``EMBER_CACHE_DIR`` now says (if Ember is imported)."""
    module = sys.modules.get("ember.runtime.config")
    if module is not None:
        module.config.cache_dir = module.Config.from_env(os.environ).cache_dir


@dataclass(frozen=True)
class WarmJob:
    """One warm-autotune measurement: the workload (family and shape), the compiler and
    its mode, device, dtype name and Ember's backend."""

    family: str
    shape: list[int]
    compiler: str
    mode: str | None
    device: str
    dtype: str
    ember_backend: str = "inductor"


def measure(job: WarmJob, run: CacheDirs, timeout_s: float = 600.0) -> float | str:
    """The first-call time of ``job`` in a fresh process with ``run``'s autotune cache and
    empty compiled caches (module docstring), in seconds, or the error (never raises)."""
    with tempfile.TemporaryDirectory(prefix="ember-warm-autotune-") as tmp:
        fresh = CacheDirs.under(Path(tmp))
        env = dict(os.environ)
        env.update(fresh.environment())
        if job.compiler == "ember":
            tuned = run.ember / EMBER_AUTOTUNE_FOLDER
            if tuned.is_dir():
                shutil.copytree(tuned, fresh.ember / EMBER_AUTOTUNE_FOLDER)
        else:
            env["TORCHINDUCTOR_CACHE_DIR"] = str(run.inductor)
            env["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
            env["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
        env["PYTHONPATH"] = os.pathsep.join(
            [str(TOOLS_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        cmd = [sys.executable, "-m", "benchlib.matmul_warm", json.dumps(asdict(job))]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return f"TimeoutExpired: compile took over {timeout_s:.0f} s"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"subprocess exited {proc.returncode}: {tail}"
    try:
        result = json.loads(lines[-1])
    except json.JSONDecodeError:
        return f"unreadable subprocess output: {lines[-1][:200]}"
    if "error" in result:
        return str(result["error"])
    return float(result["first_call_s"])


def _first_call_seconds(job: WarmJob) -> float:
    import torch

    from benchlib import compilers
    from benchlib.matmul import Workload, family
    from benchlib.matmul_runner import warm_up
    from benchlib.timing import synchronize

    device = torch.device(job.device)
    module, inputs = Workload(family(job.family), tuple(job.shape)).make(
        device, getattr(torch, job.dtype))
    warm_up({job.compiler}, device)
    compilers.reset(job.compiler)
    start = time.perf_counter()
    compiled = compilers.compile_fn(job.compiler, module, job.ember_backend, job.mode)
    with torch.no_grad():
        compiled(*inputs)
    synchronize(device)
    return time.perf_counter() - start


def _worker(job: WarmJob) -> dict[str, object]:
    try:
        return {"first_call_s": _first_call_seconds(job)}
    except Exception as exc:  # noqa: BLE001 - report, never crash: the parent records it
        first = (str(exc).strip().splitlines() or [""])[0]
        return {"error": f"{type(exc).__name__}: {first}"}


if __name__ == "__main__":
    print(json.dumps(_worker(WarmJob(**json.loads(sys.argv[1])))))
