"""Installing the backend alone (issue 14, item 6): in an empty virtual environment,
``ember-runtime``, ``ember-aot`` and ``ember-inductor`` from freshly built wheels, no
``ember-frontend``, compile a model through ``torch.compile(backend="ember")`` and through
``ember.runtime.import_exported`` + ``python -m ember.aot`` / ``python -m ember.inductor``
+ ``load_artifact``.

The environment has no pip and no torch of its own: torch and its dependencies come from
this interpreter's ``site-packages`` through a ``.pth`` of symbolic links that leaves out
this checkout's editable Ember installs (``tools/compat_matrix.make_venv``), which takes
seconds where ``pip install torch==2.13.0`` takes minutes. The script checks that every
``ember.*`` it imports is the installed wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from compat_matrix import build_wheel, current_source, make_venv

SCRIPT = textwrap.dedent(
    """
    import importlib.metadata, subprocess, sys, torch
    import ember.runtime, ember.aot, ember.inductor
    for module in (ember.runtime, ember.aot, ember.inductor):
        assert module.__file__.startswith(sys.prefix), f"{module.__name__}: {module.__file__}"
    try:
        import ember.frontend
    except ModuleNotFoundError as e:
        assert e.name == "ember.frontend", e.name
    else:
        raise AssertionError(f"ember.frontend must not be installed: {ember.frontend.__file__}")
    backends = {ep.name for ep in importlib.metadata.entry_points(group="torch_dynamo_backends")}
    assert "ember" in backends, backends

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    expected = model(x)

    compiled = torch.compile(model, backend="ember")
    torch.testing.assert_close(compiled(x), expected, rtol=1e-4, atol=1e-5)
    print("torch.compile ok")

    from ember.runtime import import_exported
    from ember.runtime.compiled import load_artifact
    from ember.runtime.ir import save
    save(import_exported(torch.export.export(model, (x,))), "exported.ember")
    for stage, src, dst in (("aot", "exported.ember", "aot.ember"),
                            ("inductor", "aot.ember", "compiled.ember")):
        subprocess.run([sys.executable, "-m", f"ember.{stage}", src, "-o", dst], check=True)
    (out,) = load_artifact("compiled.ember", trusted=True)(x)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    print("import_exported ok")
    """
)


@pytest.mark.slow
def test_runtime_aot_inductor_wheels_without_frontend(tmp_path: Path) -> None:
    wheels = [build_wheel(current_source(stage), tmp_path / "wheels")
              for stage in ("runtime", "aot", "inductor")]
    python = make_venv(tmp_path / "venv", wheels, tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(python), "-c", SCRIPT], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.split() == ["torch.compile", "ok", "import_exported", "ok"], proc.stdout
