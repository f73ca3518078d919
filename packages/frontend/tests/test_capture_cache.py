"""The capture cache (ember.frontend.capture_cache): a fresh process with a filled cache
runs its first call without capturing, imports none of the capture or compile
machinery, and every portable guard kind rejects a changed value.

Each case runs in a fresh subprocess over one cache directory (the program cache and
the capture cache are on there; the suite keeps them off, conftest.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

USER_MODULE = '''
import torch

FACTOR = 2.0


def helper(x, bias=1.0):
    return x * FACTOR + bias   # HELPER


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.scale = 0.5

    def forward(self, x):
        y = helper(self.fc(x.float())) * self.scale
        if self.training:
            y = y + 1.0
        return y.to(torch.get_default_dtype()), {"twice": y * 2}
'''

RUNNER = '''
import json, os, sys
from pathlib import Path
import torch
import usermod
import ember.frontend

# every case runs against the entries the first process stored (a miss stores its own)
captures = Path(os.environ["EMBER_CACHE_DIR"]) / "captures"
saved = {p: p.read_bytes() for p in captures.glob("*")} if captures.exists() else {}


def run_case(env):
    for path, data in saved.items():
        path.write_bytes(data)
    torch.manual_seed(0)
    device = env.get("CC_DEVICE", "cpu")
    usermod.FACTOR = float(env.get("CC_FACTOR", "2.0"))
    model = usermod.Block().to(device)
    model.scale = float(env.get("CC_SCALE", "0.5"))
    model.train(env.get("CC_TRAINING", "1") == "1")
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, env.get("CC_DEFAULT_DTYPE", "float32")))
    x = torch.randn(int(env.get("CC_BATCH", "4")), 8,
                    dtype=getattr(torch, env.get("CC_DTYPE", "float32")), device=device)
    compiled = ember.frontend.compile(model, backend=env.get("CC_BACKEND", "aot_eager"))
    try:
        with torch.set_grad_enabled(env.get("CC_GRAD", "1") == "1"):
            out, extra = compiled(x)
            want, want_extra = model(x)
    finally:
        torch.set_default_dtype(default_dtype)
    return {
        "hits": compiled.stats.capture_cache_hits,
        "compiles": compiled.stats.compiles,
        "same": bool(torch.allclose(out, want)) and out.dtype == want.dtype
                and bool(torch.allclose(extra["twice"], want_extra["twice"])),
        "keys": sorted(extra),
    }


results = {}
for name, env in json.loads(os.environ.get("CC_CASES", '[["only", {}]]')):
    print(f"CASE {name}", file=sys.stderr, flush=True)
    results[name] = run_case(env)
heavy = [m for m in ("sympy", "torch._dynamo", "ember.aot", "ember.inductor", "triton",
                     "ember.frontend.bytecode.interpreter", "ember.runtime.tracing")
         if m in sys.modules]
print(json.dumps({"cases": results, "heavy": heavy}))
'''


def _copy(filled: Path, tmp_path: Path) -> Path:
    """A copy of the filled directory (a miss stores its own capture: each case starts
    from the first process's entries)."""
    target = tmp_path / "copy"
    shutil.copytree(filled, target, symlinks=True)
    return target


def _run(tmp_path: Path, cases: list[tuple[str, dict[str, str]]] | None = None,
         **env: str) -> dict[str, dict[str, object]]:
    """Run ``cases`` (name, settings) one after another in ONE fresh process over the
    cache in ``tmp_path``; each case compiles afresh, so its first call asks the capture
    cache. Returns each case's result with its ``log`` (and ``heavy``: the modules the
    process had imported at the end)."""
    full = dict(os.environ)
    full.update({"EMBER_CACHE_DIR": str(tmp_path / "cache"), "EMBER_PROGRAM_CACHE": "1",
                 "EMBER_CAPTURE_CACHE": "1", "EMBER_LOGS": "cache",
                 "CC_CASES": json.dumps(cases or [("only", {})]),
                 "PYTHONPATH": os.pathsep.join([str(tmp_path), full.get("PYTHONPATH", "")])})
    full.update(env)
    proc = subprocess.run([sys.executable, str(tmp_path / "runner.py")], env=full,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    logs = dict(part.partition("\n")[::2] for part in proc.stderr.split("CASE ")[1:])
    results: dict[str, dict[str, object]] = printed["cases"]
    for name, result in results.items():
        result["log"] = logs.get(name, "")
        result["heavy"] = printed["heavy"]
    return results


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("capture_cache")
    (tmp / "usermod.py").write_text(textwrap.dedent(USER_MODULE))
    (tmp / "runner.py").write_text(textwrap.dedent(RUNNER))
    first = _run(tmp)["only"]
    assert first["hits"] == 0 and first["compiles"] == 1 and first["same"], first
    assert "capture cache store" in str(first["log"]), first["log"]
    return tmp


def test_a_filled_cache_answers_the_first_call_without_capturing(filled: Path,
                                                                 tmp_path: Path) -> None:
    second = _run(_copy(filled, tmp_path))["only"]
    assert second["hits"] == 1 and second["compiles"] == 0, second["log"]
    assert second["same"] and second["keys"] == ["twice"]
    assert second["heavy"] == [], second["heavy"]
    assert "capture cache hit" in str(second["log"])


_DEFAULT_DTYPE_MISS = "guard failed: torch.get_default_dtype() == torch.float32 (got torch.float64)"

CHANGES = {
    "shape": ({"CC_BATCH": "5"}, "guard failed: x.shape == (4, 8) (got (5, 8))"),
    "dtype": ({"CC_DTYPE": "float64"},
              "guard failed: x.dtype == torch.float32 (got torch.float64)"),
    "module_attribute": ({"CC_SCALE": "0.25"}, "guard failed: self.scale == 0.5 (got 0.25)"),
    "global": ({"CC_FACTOR": "3.0"}, "guard failed: G['FACTOR'] == 2.0 (got 3.0)"),
    "training": ({"CC_TRAINING": "0"}, "guard failed: self.training == True (got False)"),
    "default_dtype": ({"CC_DEFAULT_DTYPE": "float64"}, _DEFAULT_DTYPE_MISS),
    "grad_mode": ({"CC_GRAD": "0"},
                  "guard failed: torch.is_grad_enabled() == True (got False)"),
}
"""Each guard kind's change, and the miss it must log."""


def test_each_changed_value_is_a_miss(filled: Path, tmp_path: Path) -> None:
    # NOTE: one fresh process runs every case (each compiles afresh and restores the
    # first process's entries): a process per case would cost seconds each
    cases = [(name, env) for name, (env, _) in CHANGES.items()] + [("unchanged", {})]
    results = _run(_copy(filled, tmp_path), cases)
    for name, (_, why) in CHANGES.items():
        result = results[name]
        assert result["hits"] == 0 and result["compiles"] == 1, (name, result["log"])
        assert result["same"], name
        assert why in str(result["log"]), (name, result["log"])
    assert results["unchanged"]["hits"] == 1, results["unchanged"]["log"]


def test_a_replaced_inlined_function_is_a_miss(filled: Path, tmp_path: Path) -> None:
    copy = _copy(filled, tmp_path)
    changed = textwrap.dedent(USER_MODULE).replace("x * FACTOR + bias   # HELPER",
                                                   "x * FACTOR - bias   # HELPER")
    (copy / "usermod.py").write_text(changed)
    result = _run(copy)["only"]
    assert result["hits"] == 0 and result["same"], result["log"]
    assert "the code of usermod.helper changed" in str(result["log"]), result["log"]


def test_a_changed_default_in_the_source_is_a_miss(filled: Path, tmp_path: Path) -> None:
    copy = _copy(filled, tmp_path)
    changed = textwrap.dedent(USER_MODULE).replace("bias=1.0", "bias=2.0")
    (copy / "usermod.py").write_text(changed)
    result = _run(copy)["only"]
    assert result["hits"] == 0 and result["same"], result["log"]
    assert "capture cache miss" in str(result["log"]), result["log"]


@pytest.mark.cuda
def test_a_cuda_program_is_answered_by_the_capture_cache(tmp_path: Path) -> None:
    """On the GPU with the inductor (Triton kernels): the second process captures
    nothing and gives eager's result; neither sympy nor torch._dynamo is imported."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    (tmp_path / "usermod.py").write_text(textwrap.dedent(USER_MODULE))
    (tmp_path / "runner.py").write_text(textwrap.dedent(RUNNER))
    case = [("cuda", {"CC_DEVICE": "cuda", "CC_BACKEND": "inductor"})]
    first = _run(tmp_path, case)["cuda"]
    assert first["hits"] == 0 and first["same"], first["log"]
    second = _run(tmp_path, case)["cuda"]
    assert second["hits"] == 1 and second["compiles"] == 0 and second["same"], second["log"]
    assert "sympy" not in second["heavy"] and "torch._dynamo" not in second["heavy"]
