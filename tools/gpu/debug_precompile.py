"""Does the first launch use the Triton binaries ``precompile_triton`` built? (issue #17)

Compiles small programs with the inductor option ``precompile_triton=True`` and watches
their first call: for each Triton kernel launched, whether it took the binary the
warm-up kept (``ember.runtime.compiled.triton_warmed``) or went through Triton's JIT;
for each compile Triton's JIT ran at launch (``knobs.runtime.jit_cache_hook``, which
Triton calls on a miss of its in-memory cache), the launch's key and the warm-up's key
of the same function, side by side, and whether they were the same ``JITFunction``.

Scenarios (all by default, or name some on the command line):

- ``table``: the fix: compiled under one Ember cache root and loaded under another (the
  inductor's CUDA test does that): every launch should take a warmed binary, 0 compiles;
- ``jit-same-root``: the warmed-binary table switched off (Triton's JIT cache alone, as
  before the fix), compiled and loaded under one cache root (the frontend's case): 0
  compiles means Triton 3.x's own key matched the warm-up's;
- ``jit-other-root``: the table off, loaded under another cache root: expected to
  compile every kernel (another JITFunction, whose cache is empty);
- ``frontend``: a small conv/linear model trained one step through ``ember.frontend``
  with ``precompile_triton`` (forward and backward graphs): which launches missed the
  warmed binaries, and the argument specialization each had versus the warm-up's.

Run on the GPU machine:
``SCRIPT_ARGS="tools/gpu/debug_precompile.py" bash tools/gpu/h200_all.sh script``;
the full report goes to ``$OUT/debug_precompile.txt`` (``OUT`` defaults to
/tmp/ember-h200), the summary to stdout (last lines).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import triton
from ember.runtime.compiled import load_executor, triton_warmed
from ember.runtime.compiled.triton_kernel import TritonKernel
from ember.runtime.config import patch

# the inductor tests' helper: a core-functional program of a function on inputs
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packages" / "inductor" / "tests"))
from helpers import trace

SCENARIOS = ("table", "jit-same-root", "jit-other-root", "frontend")
_report: list[str] = []


def say(line: str = "") -> None:
    """A line of the full report (printed too)."""
    _report.append(line)
    print(line, flush=True)


@dataclass
class Watch:
    """What one scenario saw: Triton JIT compiles during the build and at the first
    call, the warmed binaries recorded, and each kernel's first-launch outcome."""

    building: bool = True
    warm_compiles: list[dict[str, Any]] = field(default_factory=list)
    launch_compiles: list[dict[str, Any]] = field(default_factory=list)
    recorded: list[tuple[Any, ...]] = field(default_factory=list)
    launches: list[dict[str, Any]] = field(default_factory=list)


def _function_id(info: Any) -> tuple[str, str]:
    """(qualified name, source hash) of the JITFunction a hook reports: the same kernel
    under any Ember cache root."""
    jit = getattr(info, "jit_function", None)
    name = str(getattr(info, "name", "?"))
    try:
        return name, str(jit.cache_key)[:12] if jit is not None else "?"
    except Exception:  # noqa: BLE001 - a diagnostic: show what it can
        return name, "?"


@contextmanager
def watching(watch: Watch, table: bool) -> Iterator[None]:
    """Install the hooks of one scenario (``table``: whether launches may take warmed
    binaries) and remove them after."""
    knobs = triton.knobs.runtime
    saved_hook = knobs.jit_cache_hook
    saved_record, saved_take = triton_warmed.record, triton_warmed.take
    saved_bind, saved_prebuilt = TritonKernel._bind, TritonKernel._bind_prebuilt

    def hook(*args: Any, **kwargs: Any) -> bool:
        info = kwargs.get("fn")
        jit = getattr(info, "jit_function", None)
        code = getattr(getattr(jit, "fn", None), "__code__", None)
        entry = {"fn": _function_id(info), "key": kwargs.get("key"),
                 "repr": kwargs.get("repr"), "jit_id": id(jit),
                 "file": getattr(code, "co_filename", None),
                 "warmup": kwargs.get("is_manual_warmup")}
        (watch.warm_compiles if watch.building else watch.launch_compiles).append(entry)
        return False  # compile it

    def record(key: Any, specialization: Any, compiled: Any) -> None:
        watch.recorded.append((key[1], key[0][:12], specialization))
        saved_record(key, specialization, compiled)

    def take(key: Any, specialization: Any) -> Any:
        return saved_take(key, specialization) if table else None

    def bind_prebuilt(self: TritonKernel, key: Any, grid: Any) -> Any:
        run = saved_prebuilt(self, key, grid)
        warm = self.warm_key()
        watch.launches.append({
            "kernel": self.name, "source": warm[0][:12] if warm else "?", "key": key,
            "warmed_for": triton_warmed.recorded_specialization(warm) if warm else None,
            "took": run is not None})
        return run

    def bind(self: TritonKernel, key: Any, args: Any, grid: Any) -> None:
        watch.launches.append({"kernel": self.name, "jit_bind": True, "key": key})
        saved_bind(self, key, args, grid)

    knobs.jit_cache_hook = hook
    triton_warmed.record = record
    triton_warmed.take = take
    TritonKernel._bind = bind  # type: ignore[method-assign]
    TritonKernel._bind_prebuilt = bind_prebuilt  # type: ignore[method-assign]
    try:
        yield
    finally:
        knobs.jit_cache_hook = saved_hook
        triton_warmed.record, triton_warmed.take = saved_record, saved_take
        TritonKernel._bind = saved_bind  # type: ignore[method-assign]
        TritonKernel._bind_prebuilt = saved_prebuilt  # type: ignore[method-assign]


def small(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The inductor CUDA test's function (a softmax kernel and a reduction)."""
    return torch.softmax(x, -1) * w, torch.relu(x - w).sum(0) + 1


def _compare(watch: Watch) -> None:
    """Each compile at launch beside the warm-up's compile of the same function."""
    warm_by_fn: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for w in watch.warm_compiles:
        warm_by_fn.setdefault(w["fn"], []).append(w)
    for c in watch.launch_compiles:
        say(f"  compiled at launch: {c['fn'][0]} (source {c['fn'][1]}) {c['repr']}")
        say(f"    launch key: {c['key']!r}")
        say(f"    launch JITFunction id {c['jit_id']} file {c['file']}")
        warm = warm_by_fn.get(c["fn"], [])
        if not warm:
            say("    no warm-up compile of this function was seen (not warmable: an "
                "integer argument? or the warm-up found it in this JITFunction's cache)")
            continue
        for w in warm:
            same = w["key"] == c["key"]
            say(f"    warm-up key: {w['key']!r}  (equal: {same})")
            say(f"    warm-up JITFunction id {w['jit_id']} (same object: "
                f"{w['jit_id'] == c['jit_id']}) file {w['file']}")
            if not same and isinstance(w["key"], tuple) and isinstance(c["key"], tuple):
                for i, (a, b) in enumerate(zip(w["key"], c["key"])):
                    if a != b:
                        say(f"    key part {i} differs: warm-up {a!r} vs launch {b!r}")
            elif not same and isinstance(w["key"], str) and isinstance(c["key"], str):
                at = next((i for i, (a, b) in enumerate(zip(w["key"], c["key"])) if a != b),
                          min(len(w["key"]), len(c["key"])))
                say(f"    keys differ from character {at}: warm-up "
                    f"{w['key'][max(0, at - 40):at + 60]!r} vs launch "
                    f"{c['key'][max(0, at - 40):at + 60]!r}")


def _summary(name: str, watch: Watch, first_call_s: float, what: str = "first call") -> str:
    took = sum(1 for x in watch.launches if x.get("took"))
    jit = sum(1 for x in watch.launches if x.get("jit_bind"))
    line = (f"{name}: warm-up compiles {len(watch.warm_compiles)}, binaries kept "
            f"{len(watch.recorded)}, first launches from kept binaries {took}, through JIT "
            f"{jit}, Triton compiles at launch {len(watch.launch_compiles)}, first call "
            f"{first_call_s:.3f} s ({what})")
    say(line)
    for x in watch.launches:
        if x.get("jit_bind"):
            say(f"  JIT launch: {x['kernel']} key {x['key']!r}")
        elif not x.get("took"):
            say(f"  not taken: {x['kernel']} (source {x['source']}) launch key {x['key']!r} "
                f"warmed for {x['warmed_for']!r}")
    _compare(watch)
    return line


def run_small(name: str, table: bool, same_root: bool) -> str:
    """One compile of :func:`small` with ``precompile_triton`` and its first call."""
    from ember.inductor.compile import compile_program
    from ember.runtime.phases import compile_profile

    say(f"== {name}")
    triton_warmed.clear()
    root = Path(tempfile.mkdtemp(prefix=f"ember-{name}-"))
    torch.manual_seed(0)
    x, w = torch.randn(64, 128, device="cuda"), torch.randn(64, 128, device="cuda")
    watch = Watch()
    with watching(watch, table):
        with patch(cache_dir=root / "build"), compile_profile() as profile:
            compiled = compile_program(trace(small, [x, w]),
                                       {"precompile_triton": True, "strict": True})
        say(f"  kernels {compiled.metadata['kernels']}, counts {dict(profile.counts)}")
        watch.building = False
        with patch(cache_dir=root / ("build" if same_root else "load")):
            run = load_executor(compiled, "forward")
            start = time.perf_counter()
            got = run([x, w])
            torch.cuda.synchronize()
            first = time.perf_counter() - start
    torch.testing.assert_close(got[1], small(x, w)[1])
    return _summary(name, watch, first)


def run_frontend() -> str:
    """One training step of a small conv/linear model through ``ember.frontend``."""
    import ember.frontend

    say("== frontend")
    triton_warmed.clear()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(256, 10),
        torch.nn.LayerNorm(10)).cuda()
    x = torch.randn(8, 3, 16, 16, device="cuda")
    watch = Watch()
    root = Path(tempfile.mkdtemp(prefix="ember-frontend-"))
    phases: dict[str, float] = {}
    with watching(watch, True), patch(cache_dir=root, program_cache=False):
        fast = ember.frontend.compile(model, options={"precompile_triton": True})
        # NOTE: the frontend compiles and launches within one call: the compiles seen
        # before the first launch of a kernel are the warm-ups (is_manual_warmup)
        watch.building = False
        start = time.perf_counter()
        fast(x).sum().backward()
        torch.cuda.synchronize()
        phases["first step"] = time.perf_counter() - start
    warmups = [c for c in watch.launch_compiles if c["warmup"]]
    watch.launch_compiles = [c for c in watch.launch_compiles if not c["warmup"]]
    watch.warm_compiles += warmups
    return _summary("frontend", watch, phases["first step"], "first step, compile included")


def main(argv: list[str]) -> None:
    chosen = argv or list(SCENARIOS)
    unknown = set(chosen) - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown scenarios {sorted(unknown)}; choose from {SCENARIOS}")
    say(f"torch {torch.__version__}, triton {triton.__version__}, "
        f"{torch.cuda.get_device_name()}")
    lines: list[str] = []
    for name in chosen:
        try:
            if name == "frontend":
                lines.append(run_frontend())
            else:
                lines.append(run_small(name, table=name == "table",
                                       same_root=name == "jit-same-root"))
        except Exception as e:  # noqa: BLE001 - report and go on with the next one
            import traceback

            say(traceback.format_exc())
            lines.append(f"{name}: FAILED {type(e).__name__}: {e}")
    out = Path(os.environ.get("OUT", "/tmp/ember-h200"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "debug_precompile.txt").write_text("\n".join(_report) + "\n")
    print("\n== summary (expected: table and frontend 0 compiles at launch)")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
