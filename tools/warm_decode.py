"""The warm start's program load on a big program, timed on the CPU (issue #17).

    python tools/warm_decode.py [--layers 12] [--runs 5] [--repeats 5] [--rows 30]
                                [--cache-dir DIR]

A warm start loads the compiled program from the whole-program cache
(``ember.runtime.cache.program_cache.load_entry``: read, check, decode) and builds its
runnable (``ember.runtime.callable.ProgramCallable.__init__``). On the GPU machine the
zoo's ``hf_bert`` (full suite, training) is ~2,650 nodes over its forward and backward
graphs; ``tools/gpu/warm_start.py`` on the CPU uses the quick suite, 2 layers. This
script builds a BERT training program of the full suite's depth (``--layers``, default
12) at the quick suite's width (the node count depends on the depth, not the width, and
a narrow model compiles and runs in seconds on 2 cores), then:

1. a fresh process (empty caches under a temporary directory, or ``--cache-dir``)
   compiles it with Ember's ``inductor`` backend and runs one training step, which
   stores the compiled program in the program cache;
2. ``--runs`` fresh processes over the filled caches each time their *first*
   ``load_entry`` and ``ProgramCallable(...)`` of the largest entry (what a warm start
   pays), then ``--repeats`` more of each in the same process. ``*_gc_s`` is the
   garbage collector's share of the first of each, ``*_no_gc_s`` the rest: a
   collection of the oldest generation that the decode's new objects set off (the
   decode runs with the collector paused, ``ember.runtime.ir.gc_pause``, so it falls
   into ``ProgramCallable``) costs ~0.07 s here when it comes, which depends on the
   process's earlier allocations and on the size of its heap (it comes once new
   survivors pass a quarter of the old objects);
3. one more fresh process runs them under cProfile and prints the ``--rows`` functions
   with the most internal time (cProfile inflates the many small calls of a decode:
   read the proportions, not the seconds).

The report gives the median of each (seconds) and the program's node count. A second
run with ``--cache-dir`` of the first skips step 1 (the entries are reused; delete the
directory after changing the IR's encoding).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))

from benchlib.coldstart import worker_env  # noqa: E402


def _store(layers: int) -> dict[str, object]:
    """Compile the BERT training step and run it once (the program cache stores it)."""
    import torch
    import transformers
    from benchlib.runner import make_step
    from zoo.hf import FieldOf
    from zoo.registry import build, seeded_tokens

    torch.manual_seed(0)
    batch, seq, width, heads, vocab = 2, 64, 64, 4, 1000
    config = transformers.BertConfig(
        num_hidden_layers=layers, hidden_size=width, num_attention_heads=heads,
        intermediate_size=4 * width, vocab_size=vocab, max_position_embeddings=seq,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    device = torch.device("cpu")
    module = build(lambda: FieldOf(transformers.BertModel(config), "last_hidden_state"),
                   device, torch.float32)
    inputs = (seeded_tokens(batch, seq, vocab=vocab, device=device, seed=31),)
    start = time.perf_counter()
    step = make_step("ember", module, inputs, True, "inductor")
    step()
    return {"compile_s": round(time.perf_counter() - start, 2)}


def _largest_entry() -> str:
    from ember.runtime.cache.local import SUFFIX
    from ember.runtime.cache.program_cache import local_cache

    entries = sorted(local_cache().directory.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_size)
    if not entries:
        raise SystemExit("no program cache entry: the store step failed")
    return entries[-1].name.removesuffix(SUFFIX)


def _gc_timer() -> list[float]:
    """A one-element list that adds up the seconds the garbage collector runs from now."""
    import gc

    total = [0.0]
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            total[0] += time.perf_counter() - started.pop()

    gc.callbacks.append(on_gc)
    return total


def _time(repeats: int, rows: int) -> dict[str, object]:
    """Time the first load_entry and ProgramCallable, then ``repeats`` more; cProfile
    them instead when ``rows``."""
    import torch  # noqa: F401 - process start, as in a warm start

    from ember.runtime.cache.program_cache import load_entry
    from ember.runtime.callable import ProgramCallable

    digest = _largest_entry()
    profile = cProfile.Profile() if rows else None
    collecting = _gc_timer()
    loads: list[float] = []
    builds: list[float] = []
    collected: list[tuple[float, float]] = []
    program = None
    for _ in range(1 + (0 if rows else repeats)):
        if profile is not None:
            profile.enable()
        start, gc_start = time.perf_counter(), collecting[0]
        program = load_entry(digest)
        middle, gc_middle = time.perf_counter(), collecting[0]
        if program is None:
            raise SystemExit(f"entry {digest[:16]} did not load")
        ProgramCallable(program)
        end = time.perf_counter()
        if profile is not None:
            profile.disable()
        loads.append(middle - start)
        builds.append(end - middle)
        collected.append((gc_middle - gc_start, collecting[0] - gc_middle))
    assert program is not None
    nodes = {name: len(g.nodes) for name, g in program.graphs.items()}
    report: dict[str, object] = {
        "load_entry_first_s": loads[0], "callable_first_s": builds[0],
        "load_entry_first_gc_s": collected[0][0], "callable_first_gc_s": collected[0][1],
        "load_entry_first_no_gc_s": loads[0] - collected[0][0],
        "callable_first_no_gc_s": builds[0] - collected[0][1], "nodes": nodes}
    if len(loads) > 1:
        report["load_entry_again_s"] = statistics.median(loads[1:])
        report["callable_again_s"] = statistics.median(builds[1:])
    if profile is not None:
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(rows)
        report["profile"] = text.getvalue()
    return report


def _subprocess(env: dict[str, str], *args: str) -> dict[str, object]:
    proc = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{args[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    found: dict[str, object] = json.loads(lines[-1])
    return found


def _main(args: argparse.Namespace, cache: Path) -> None:
    env = worker_env(cache)
    if not (cache / "ember" / "programs").is_dir():
        print(f"store: {json.dumps(_subprocess(env, '--store', str(args.layers)))}")
    runs = [_subprocess(env, "--time", str(args.repeats), "0") for _ in range(args.runs)]
    first = runs[0]
    print(f"nodes: {first['nodes']} ({sum(first['nodes'].values())} in all)")  # type: ignore
    for key in ("load_entry_first_s", "callable_first_s", "load_entry_first_gc_s",
                "callable_first_gc_s", "load_entry_first_no_gc_s", "callable_first_no_gc_s",
                "load_entry_again_s", "callable_again_s"):
        values = [float(r[key]) for r in runs if key in r]  # type: ignore[arg-type]
        print(f"{key:26} median {statistics.median(values):.4f}  "
              f"[{', '.join(f'{v:.4f}' for v in values)}]")
    if args.rows:
        profiled = _subprocess(env, "--time", "0", str(args.rows))
        print(profiled["profile"])


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--store":
        print(json.dumps(_store(int(argv[1]))))
        return 0
    if argv and argv[0] == "--time":
        print(json.dumps(_time(int(argv[1]), int(argv[2]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, default=30)
    parser.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.cache_dir is not None:
        _main(args, args.cache_dir)
        return 0
    with tempfile.TemporaryDirectory(prefix="ember-warm-decode-") as tmp:
        _main(args, Path(tmp))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main(sys.argv[1:]))
