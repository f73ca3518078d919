"""What a warm start imports (issue #17): ``import ember.frontend``, and a fresh process
whose compile and first call the caches answer (capture cache and whole-program cache
hits), import none of the modules only a cold compile runs: capture, graph breaks,
aot, inductor, the IR's text printer and parser, the verifier, CUDA graphs.

Each module imported costs a warm start its import time and allocations (which also
bring torch's full garbage collection nearer). A module added to the warm path on
purpose is removed from :data:`COLD_ONLY` here; one pulled in by accident (a top-level
import of something a cold compile needs) fails these tests: import it where it is
used (``docs/compile-time.md``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

COLD_ONLY = (
    # the other stages and the tracing capture
    "ember.aot",
    "ember.inductor",
    "ember.frontend.trace",
    "ember.runtime.tracing",
    # strict capture: the interpreter, graph breaks, argument binding, symbolic ints
    "ember.frontend.bytecode.interpreter",
    "ember.frontend.bytecode.segment",
    "ember.frontend.bytecode.breaks",
    "ember.frontend.bytecode.binding",
    "ember.frontend.bytecode.inlined_breaks",
    "ember.frontend.bytecode.symbolic_ints",
    "ember.frontend.free_layouts",
    # the IR's text form, verifier and cleanup passes (a cache hit loads JSON)
    "ember.runtime.ir.parser",
    "ember.runtime.ir.printer",
    "ember.runtime.ir.text_scanner",
    "ember.runtime.ir.text_syntax",
    "ember.runtime.ir.text_values",
    "ember.runtime.ir.verifier",
    "ember.runtime.ir.symbol_rules",
    "ember.runtime.ir.cleanup",
    # CUDA graphs (a CPU model, no mode)
    "ember.runtime.cudagraphs_pool",
    "ember.runtime.cudagraphs_policy",
)
"""Modules a warm start must not import (a prefix names its submodules too)."""

WARM_START = '''
import json, sys
import torch
import ember.frontend

if sys.argv[1] == "compile":
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 4))
    compiled = ember.frontend.compile(model)
    x = torch.randn(8, 16)
    with torch.no_grad():
        assert torch.allclose(compiled(x), model(x), atol=1e-5)
    stats = compiled.stats
    found = {"capture_cache_hits": stats.capture_cache_hits, "compiles": stats.compiles}
else:
    found = {}
found["modules"] = sorted(m for m in sys.modules if m.startswith("ember"))
print(json.dumps(found))
'''


def _run(tmp_path: Path, what: str) -> dict[str, object]:
    script = tmp_path / "warm_start.py"
    script.write_text(textwrap.dedent(WARM_START))
    env = dict(os.environ)
    env.update({"EMBER_CACHE_DIR": str(tmp_path / "cache"), "EMBER_PROGRAM_CACHE": "1",
                "EMBER_CAPTURE_CACHE": "1"})
    env.pop("EMBER_LOGS", None)  # a log topic may import what it reports with
    proc = subprocess.run([sys.executable, str(script), what], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return found


def _cold_only(modules: object) -> list[str]:
    assert isinstance(modules, list)
    return [m for m in modules
            if any(m == c or m.startswith(c + ".") for c in COLD_ONLY)]


def test_import_ember_frontend_imports_no_cold_only_module(tmp_path: Path) -> None:
    modules = _run(tmp_path, "import")["modules"]
    assert "ember.frontend.api" in modules  # the scan sees the package's modules
    assert not _cold_only(modules), (
        f"import ember.frontend imported modules only a cold compile needs: "
        f"{_cold_only(modules)} (import them where they are used)")


def test_a_warm_start_imports_no_cold_only_module(tmp_path: Path) -> None:
    cold = _run(tmp_path, "compile")
    assert cold["capture_cache_hits"] == 0 and cold["compiles"] == 1, cold
    assert {"ember.aot", "ember.inductor", "ember.runtime.ir.printer"} <= set(
        _cold_only(cold["modules"]))  # the list names what a cold compile imports
    warm = _run(tmp_path, "compile")
    assert warm["capture_cache_hits"] == 1 and warm["compiles"] == 0, warm
    assert not _cold_only(warm["modules"]), (
        f"a warm start (compile and first call answered by the caches) imported modules "
        f"only a cold compile needs: {_cold_only(warm['modules'])} (import them where "
        f"they are used)")
