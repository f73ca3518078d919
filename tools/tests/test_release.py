"""tools/release.py in a throwaway git repository holding a copy of one package."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from release import ReleaseError, main, move_unreleased, release

ROOT = Path(__file__).resolve().parent.parent.parent

CHANGELOG = """# Changelog

## Unreleased
- second change

## Unreleased
- first change

## 0.1.0
- First release.
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repo with ``packages/aot``: the real pyproject and README, a tiny source
    tree with a ``__version__``, and :data:`CHANGELOG`."""
    pkg = tmp_path / "packages" / "aot"
    (pkg / "src" / "ember" / "aot").mkdir(parents=True)
    shutil.copy(ROOT / "packages" / "aot" / "pyproject.toml", pkg / "pyproject.toml")
    text = (pkg / "pyproject.toml").read_text()
    (pkg / "pyproject.toml").write_text(text.replace(
        text.split('version = "')[1].split('"')[0], "0.1.0", 1))
    (pkg / "README.md").write_text("# ember-aot\n")
    (pkg / "CHANGELOG.md").write_text(CHANGELOG)
    (pkg / "src" / "ember" / "aot" / "__init__.py").write_text('__version__ = "0.1.0"\n')
    (pkg / "src" / "ember" / "aot" / "stage.py").write_text("class AotStage: ...\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / ".gitignore").write_text("dist/\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "init")
    return tmp_path


def test_release_bumps_moves_changelog_records_and_builds(repo: Path) -> None:
    entry = release(repo, "aot", "0.2.0", "2026-12-01", do_build=True)
    pkg = repo / "packages" / "aot"
    assert 'version = "0.2.0"' in (pkg / "pyproject.toml").read_text()
    assert (pkg / "src/ember/aot/__init__.py").read_text() == '__version__ = "0.2.0"\n'
    assert (pkg / "CHANGELOG.md").read_text() == (
        "# Changelog\n\n## Unreleased\n\n## 0.2.0 — 2026-12-01\n- second change\n"
        "- first change\n\n## 0.1.0\n- First release.\n")
    recorded = tomllib.loads((repo / "releases.toml").read_text())["release"]
    assert recorded == [{"package": "ember-aot", "version": "0.2.0",
                         "commit": entry.commit, "date": "2026-12-01"}]
    # the recorded commit holds the bumped sources; releases.toml is committed after it
    assert 'version = "0.2.0"' in _git(repo, "show", f"{entry.commit}:packages/aot/pyproject.toml")
    assert _git(repo, "status", "--porcelain") == ""
    assert _git(repo, "rev-parse", "HEAD~1").strip() == entry.commit
    wheel = repo / "dist" / "ember_aot-0.2.0-py3-none-any.whl"
    assert (repo / "dist" / "ember_aot-0.2.0.tar.gz").is_file()
    with zipfile.ZipFile(wheel) as z:
        assert "ember/aot/stage.py" in z.namelist()
        assert "Version: 0.2.0" in z.read("ember_aot-0.2.0.dist-info/METADATA").decode()


def test_refuses_unknown_stage_dirty_package_and_old_versions(repo: Path) -> None:
    with pytest.raises(ReleaseError, match="unknown stage 'backend'; expected one of runtime"):
        release(repo, "backend", "1.0.0", "2026-12-01", do_build=False)
    with pytest.raises(ReleaseError, match=r"ember-aot 0.1.0 is not greater than ember-aot 0.1.0"):
        release(repo, "aot", "0.1.0", "2026-12-01", do_build=False)
    with pytest.raises(ReleaseError, match="is not MAJOR.MINOR.PATCH"):
        release(repo, "aot", "0.2", "2026-12-01", do_build=False)
    (repo / "packages/aot/src/ember/aot/stage.py").write_text("# edited\n")
    with pytest.raises(ReleaseError, match="uncommitted changes in packages/aot"):
        release(repo, "aot", "0.2.0", "2026-12-01", do_build=False)
    _git(repo, "commit", "-q", "-am", "edit")
    release(repo, "aot", "0.1.5", "2026-12-01", do_build=False)
    (repo / "packages/aot/CHANGELOG.md").write_text(
        (repo / "packages/aot/CHANGELOG.md").read_text().replace(
            "## Unreleased\n", "## Unreleased\n- third change\n"))
    _git(repo, "commit", "-q", "-am", "changelog")
    # 0.1.3 is above the pyproject's 0.1.0 of the first commit but below the last release
    (repo / "packages/aot/pyproject.toml").write_text(
        (repo / "packages/aot/pyproject.toml").read_text().replace("0.1.5", "0.1.0"))
    _git(repo, "commit", "-q", "-am", "pyproject edited back")
    with pytest.raises(ReleaseError, match="0.1.3 is not greater than ember-aot 0.1.5"):
        release(repo, "aot", "0.1.3", "2026-12-01", do_build=False)
    # nothing under Unreleased after a release: refused (exit status 1 from the CLI)
    release(repo, "aot", "0.1.6", "2026-12-01", do_build=False)
    assert main(["aot", "0.1.7", "--repo", str(repo), "--no-build"]) == 1
    recorded = tomllib.loads((repo / "releases.toml").read_text())["release"]
    versions = [r["version"] for r in recorded]
    assert versions == ["0.1.5", "0.1.6"]


def test_move_unreleased_without_entries_is_refused() -> None:
    with pytest.raises(ReleaseError, match="no entries under '## Unreleased'"):
        move_unreleased("# Changelog\n\n## Unreleased\n\n## 0.1.0\n- x\n", "0.2.0", "2026-12-01")
