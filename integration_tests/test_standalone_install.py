"""Each stage installs alone: wheels build per package, and runtime + frontend in an empty
virtual environment (no aot, no inductor) run ``compile(model, backend="eager")``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent(
    """
    import importlib.util, torch
    import ember.frontend
    assert importlib.util.find_spec("ember.aot") is None, "ember.aot must not be installed"
    assert importlib.util.find_spec("ember.inductor") is None
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    compiled = ember.frontend.compile(model, backend="eager")
    assert torch.equal(compiled(x), model(x))
    try:
        ember.frontend.compile(model, backend="inductor")(x)
    except Exception as e:  # the message must name the package to install
        assert "ember-aot" in str(e) or "ember-inductor" in str(e), str(e)
    else:
        raise AssertionError("backend=inductor must fail without its stages installed")
    print("standalone ok")
    """
)


def run(*cmd: str | Path, cwd: Path = ROOT) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.mark.slow
def test_each_package_builds_a_wheel(tmp_path: Path) -> None:
    for stage in ("runtime", "frontend", "aot", "inductor"):
        run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
            "-w", tmp_path, ROOT / "packages" / stage)
    wheels = sorted(p.name.split("-")[0] for p in tmp_path.glob("*.whl"))
    assert wheels == ["ember_aot", "ember_frontend", "ember_inductor", "ember_runtime"]


@pytest.mark.slow
def test_runtime_and_frontend_alone_in_a_fresh_venv(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    py = venv / "bin" / "python"
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run(*pip, "torch==2.13.0")
    run(*pip, ROOT / "packages" / "runtime", ROOT / "packages" / "frontend")
    out = run(py, "-c", SCRIPT, cwd=tmp_path)
    assert "standalone ok" in out
