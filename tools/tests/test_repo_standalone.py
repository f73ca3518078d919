"""The repository stands on its own: `hatch run test|demo` go through tools/dev.py (whose
environment resolves from this checkout alone), docs cite only documents inside the
repository and their relative links resolve, and the README says how to get eager's
random streams."""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _hatch_default() -> dict[str, object]:
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    env: dict[str, object] = doc["tool"]["hatch"]["envs"]["default"]
    return env


@pytest.mark.parametrize("script", ["test", "demo"])
def test_hatch_scripts_run_dev_py(script: str) -> None:
    scripts = _hatch_default()["scripts"]
    assert isinstance(scripts, dict)
    argv = shlex.split(scripts[script])
    assert argv[:3] == ["python", "tools/dev.py", script]
    assert (REPO / argv[1]).is_file()


def test_hatch_does_not_install_the_unpublished_root_project() -> None:
    # the root project depends on the four packages of this checkout, which no index has
    env = _hatch_default()
    assert env.get("skip-install") is True
    assert not env.get("dependencies")


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout.split("\n")
    suffixes = {".py", ".md", ".toml", ".txt", ".cfg", ".sh", ".yml", ".yaml", ""}
    return [REPO / p for p in out if p and Path(p).suffix in suffixes
            and (REPO / p).is_file()]


def test_no_file_cites_a_document_outside_the_repository() -> None:
    pattern = re.compile(r"DESIGN\.md|\.\./shared/")
    this = Path(__file__).resolve()
    hits = [f"{p.relative_to(REPO)}:{i}: {line.strip()}"
            for p in _tracked_text_files() if p.resolve() != this
            for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
            if pattern.search(line)]
    assert hits == [], "cite docs/architecture.md or docs/ir-contract.md instead:\n" + \
        "\n".join(hits)


@pytest.mark.parametrize("page", ["README.md", "docs/architecture.md", "docs/ir-contract.md",
                                  "packages/aot/README.md", "tools/README.md"])
def test_relative_links_resolve(page: str) -> None:
    path = REPO / page
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text())
    local = [link for link in links if "://" not in link]
    assert local or page.startswith("packages/")
    missing = [link for link in local if not (path.parent / link).exists()]
    assert missing == []


def test_readme_says_how_to_get_eagers_random_streams() -> None:
    text = (REPO / "README.md").read_text()
    assert re.search(r'options=\{"eager_random": True\}', text)
