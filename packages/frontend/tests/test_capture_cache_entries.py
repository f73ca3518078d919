"""The capture cache keeps several entries per key (models behind one wrapper class
share the key), bounded by ``MAX_ENTRIES``; a guard on an environment variable and the
guard of ``inspect.signature`` of a module's method are portable (checked again in
the loading process).

Two fresh processes over one cache directory; each runs its steps in order, every step
compiling afresh so that its first call asks the capture cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

USER_MODULE = '''
import inspect
import os
import torch


class Chunked(torch.nn.Module):
    """HF's apply_chunking_to_forward reads the signature of a bound method."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def chunk(self, x):
        return self.fc(x)

    def forward(self, x):
        return self.chunk(x) * len(inspect.signature(self.chunk).parameters)


class Wrap(torch.nn.Module):
    """One class around several models: one capture-cache key for all of them."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        y = self.inner(x)
        if os.environ.get("CC_FLAG") == "1":
            y = y * 2
        return y


def make(name):
    torch.manual_seed(0)
    if name == "linear":
        return Wrap(torch.nn.Linear(8, 8))
    if name == "mlp":
        return Wrap(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                        torch.nn.Linear(16, 8)))
    if name == "chunked":
        return Wrap(Chunked())
    return Wrap(torch.nn.Tanh())
'''

RUNNER = '''
import json, os, sys
import torch
import usermod
import ember.frontend
from ember.frontend import capture_cache

capture_cache.MAX_ENTRIES = int(os.environ.get("CC_MAX", "8"))
results = []
for name, flag in json.loads(os.environ["CC_STEPS"]):
    os.environ.pop("CC_FLAG", None)
    if flag:
        os.environ["CC_FLAG"] = flag
    print(f"STEP {name} {flag}", file=sys.stderr, flush=True)
    model = usermod.make(name)
    compiled = ember.frontend.compile(model, backend="aot_eager")
    x = torch.randn(4, 8)
    with torch.no_grad():
        same = bool(torch.allclose(compiled(x), model(x)))
    results.append({"hits": compiled.stats.capture_cache_hits, "same": same})
print(json.dumps(results))
'''


def _run(tmp: Path, steps: list[tuple[str, str]], **env: str) -> list[dict[str, object]]:
    full = dict(os.environ)
    full.update({"EMBER_CACHE_DIR": str(tmp / "cache"), "EMBER_PROGRAM_CACHE": "1",
                 "EMBER_CAPTURE_CACHE": "1", "EMBER_LOGS": "cache",
                 "CC_STEPS": json.dumps(steps),
                 "PYTHONPATH": os.pathsep.join([str(tmp), full.get("PYTHONPATH", "")])})
    full.pop("CC_FLAG", None)
    full.update(env)
    proc = subprocess.run([sys.executable, str(tmp / "runner.py")], env=full,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: list[dict[str, object]] = json.loads(proc.stdout.strip().splitlines()[-1])
    for result, log in zip(results, proc.stderr.split("STEP ")[1:]):
        result["log"] = log
    return results


def test_models_behind_one_wrapper_keep_their_own_entries(tmp_path: Path) -> None:
    (tmp_path / "usermod.py").write_text(textwrap.dedent(USER_MODULE))
    (tmp_path / "runner.py").write_text(textwrap.dedent(RUNNER))
    first = _run(tmp_path, [("linear", ""), ("mlp", ""), ("chunked", "")])
    assert [r["hits"] for r in first] == [0, 0, 0] and all(r["same"] for r in first), first
    assert "entry 1 of 3" in str(first[2]["log"]), first[2]["log"]

    # a new process: every model hits (the oldest entry too); the environment variable
    # read by forward is checked again (set now: a miss naming it, stored as a fourth)
    second = _run(tmp_path, [("linear", ""), ("mlp", ""), ("chunked", ""), ("linear", "1")],
                  CC_MAX="4")
    assert [r["hits"] for r in second] == [1, 1, 1, 0], [r["log"] for r in second]
    assert all(r["same"] for r in second)
    assert "entry 3 of 3" in str(second[0]["log"]), second[0]["log"]
    assert "os.environ.get('CC_FLAG') == None (got '1')" in str(second[3]["log"])

    # bounded: with room for two, a new model's entry keeps only the newest other one
    third = _run(tmp_path, [("tanh", "")], CC_MAX="2")
    assert third[0]["hits"] == 0 and "entry 1 of 2" in str(third[0]["log"]), third
    fourth = _run(tmp_path, [("linear", "1"), ("tanh", ""), ("mlp", "")], CC_MAX="2")
    assert [r["hits"] for r in fourth] == [1, 1, 0], [r["log"] for r in fourth]
