#!/usr/bin/env python3
"""Developer entry point that works on a fresh machine with only python3.

    python3 tools/dev.py demo      # compile the bundled models, compare eager/Ember/torch.compile
    python3 tools/dev.py test      # every package's tests, integration tests, mypy
    python3 tools/dev.py setup     # only create/update the virtual environment (.venv)

The first call creates `.venv` in the repository root, installs the pinned dev
requirements and the four Ember packages (editable). Later calls reuse it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
PY = VENV / "bin" / "python"
STAMP = VENV / ".ember-installed"
PACKAGES = ["runtime", "frontend", "aot", "inductor"]


def sh(*cmd: str, env: dict[str, str] | None = None) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, env=env)


def setup() -> None:
    requirements = (ROOT / "requirements-dev.txt").read_text()
    pyprojects = "".join((ROOT / "packages" / p / "pyproject.toml").read_text() for p in PACKAGES)
    wanted = requirements + pyprojects
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    if not PY.exists():
        sh(sys.executable, "-m", "venv", str(VENV))
    pip = [str(PY), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    sh(*pip, "-r", "requirements-dev.txt")
    editable: list[str] = []
    for p in PACKAGES:
        editable += ["-e", f"packages/{p}"]
    sh(*pip, "--no-deps", *editable)
    STAMP.write_text(wanted)


def test(extra: list[str]) -> int:
    setup()
    env = dict(os.environ)
    # the venv's tools (ninja, which torch's C++ extension builds run) come first on PATH
    env["PATH"] = os.pathsep.join([str(PY.parent), env.get("PATH", "")])
    suites = [f"packages/{p}/tests" for p in PACKAGES] + ["integration_tests", "tools/tests"]
    rc = subprocess.run(
        [str(PY), "-m", "pytest", "-n", "2", "--timeout", "600", "-q", *suites, *extra],
        cwd=ROOT, env=env,
    ).returncode
    print("+ mypy", flush=True)
    # strict for every package (pyproject.toml); testing/ is the shared test support
    rc_mypy = subprocess.run(
        [str(PY), "-m", "mypy", *[f"packages/{p}/src" for p in PACKAGES], "testing/ember_testing"],
        cwd=ROOT, env=env,
    ).returncode
    return rc or rc_mypy


def demo(extra: list[str]) -> int:
    setup()
    return subprocess.run([str(PY), "tools/demo.py", *extra], cwd=ROOT).returncode


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in ("demo", "test", "setup"):
        print(__doc__)
        return 2
    command, extra = sys.argv[1], sys.argv[2:]
    if command == "setup":
        setup()
        return 0
    return test(extra) if command == "test" else demo(extra)


if __name__ == "__main__":
    sys.exit(main())
