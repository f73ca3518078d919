"""Release one Ember package: ``python tools/release.py STAGE VERSION``.

Steps, each refusing with a message that names the problem:

1. ``STAGE`` must be one of :data:`STAGES`; ``packages/STAGE`` (and ``releases.toml``) must
   have no uncommitted change; ``VERSION`` (``MAJOR.MINOR.PATCH``) must be greater than
   both the package's last release in ``releases.toml`` and its current ``pyproject.toml``
   version; the CHANGELOG must have entries under ``## Unreleased``.
2. The version is written to ``pyproject.toml`` and to any ``__version__ = "..."`` in the
   package's sources (the IR schema version in ``ember.runtime.ir.schema`` is a format
   version, not a package version, and is never touched). The CHANGELOG's ``Unreleased``
   section(s) become ``## VERSION — DATE`` under a new, empty ``## Unreleased``.
3. Those files are committed (only those paths), the wheel and the sdist are built from
   that commit's sources (``git archive``, hatchling's build hooks from this Python: no
   network, no build isolation) into ``dist/``, and ``(package, version, commit, date)``
   is appended to ``releases.toml`` and committed.

``--no-build`` skips the build (tests); ``--repo`` releases in another checkout.
"""

from __future__ import annotations

import argparse
import datetime
import io
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("runtime", "frontend", "aot", "inductor")
RELEASES_FILE = "releases.toml"
UNRELEASED = "## Unreleased"

_VERSION_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)")
_PYPROJECT_VERSION_RE = re.compile(r'^version\s*=\s*"([^"]*)"', re.MULTILINE)
_DUNDER_VERSION_RE = re.compile(r'^__version__(\s*:\s*str)?\s*=\s*"([^"]*)"', re.MULTILINE)


class ReleaseError(Exception):
    """A release was refused; the message says why."""


@dataclass(frozen=True)
class Release:
    """One ``[[release]]`` entry of ``releases.toml``."""

    package: str
    version: str
    commit: str
    date: str

    def to_toml(self) -> str:
        return (f'[[release]]\npackage = "{self.package}"\nversion = "{self.version}"\n'
                f'commit = "{self.commit}"\ndate = "{self.date}"\n')


def parse_version(text: str) -> tuple[int, int, int]:
    """``"0.1.2"`` -> ``(0, 1, 2)``.

    Raises:
        ReleaseError: if ``text`` is not ``MAJOR.MINOR.PATCH``.
    """
    m = _VERSION_RE.fullmatch(text)
    if m is None:
        raise ReleaseError(f"version {text!r} is not MAJOR.MINOR.PATCH (e.g. 0.1.2)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def distribution(stage: str) -> str:
    """``"runtime"`` -> ``"ember-runtime"``.

    Raises:
        ReleaseError: for a stage not in :data:`STAGES`.
    """
    if stage not in STAGES:
        raise ReleaseError(f"unknown stage {stage!r}; expected one of {', '.join(STAGES)}")
    return f"ember-{stage}"


def read_releases(path: Path) -> list[Release]:
    """Every entry of a ``releases.toml`` (none if the file does not exist).

    Raises:
        ReleaseError: if an entry lacks a field.
    """
    if not path.exists():
        return []
    doc = tomllib.loads(path.read_text())
    releases = []
    for i, entry in enumerate(doc.get("release", [])):
        try:
            releases.append(Release(str(entry["package"]), str(entry["version"]),
                                    str(entry["commit"]), str(entry["date"])))
        except KeyError as e:
            raise ReleaseError(f"{path}: release #{i + 1} has no {e.args[0]!r}") from None
    return releases


def last_release(releases: list[Release], package: str) -> Release | None:
    """The highest-versioned release of ``package``, or ``None``."""
    own = [r for r in releases if r.package == package]
    return max(own, key=lambda r: parse_version(r.version)) if own else None


def git(repo: Path, *args: str) -> str:
    for attempt in range(10):  # NOTE: a shared checkout: another commit may hold the index
        proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)
        if proc.returncode == 0 or "index.lock" not in proc.stderr:
            break
        time.sleep(0.5 * (attempt + 1))
    if proc.returncode != 0:
        raise ReleaseError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def pyproject_version(pyproject: Path) -> str:
    m = _PYPROJECT_VERSION_RE.search(pyproject.read_text())
    if m is None:
        raise ReleaseError(f"{pyproject}: no 'version = \"...\"' line")
    return m.group(1)


def move_unreleased(changelog: str, version: str, date: str) -> str:
    """The CHANGELOG with its ``## Unreleased`` section(s) (merged, in order) under
    ``## VERSION — DATE``, below a new empty ``## Unreleased``.

    Raises:
        ReleaseError: if there is no Unreleased section or it has no entries.
    """
    lines = changelog.splitlines(keepends=True)
    heads = [i for i, line in enumerate(lines) if line.startswith("## ")]
    bodies: list[str] = []
    keep: list[str] = []
    first = None
    for n, start in enumerate(heads):
        end = heads[n + 1] if n + 1 < len(heads) else len(lines)
        if lines[start].strip() == UNRELEASED:
            first = len(keep) if first is None else first
            bodies.append("".join(lines[start + 1:end]).strip("\n"))
        else:
            keep.extend(lines[start:end])
    body = "\n".join(b for b in bodies if b.strip())
    if first is None or not body:
        raise ReleaseError(f"the CHANGELOG has no entries under '{UNRELEASED}': nothing to release")
    preamble = "".join(lines[:heads[0]])
    section = f"{UNRELEASED}\n\n## {version} — {date}\n{body}\n\n"
    return preamble + "".join(keep[:first]) + section + "".join(keep[first:])


def bump_sources(package_dir: Path, version: str) -> list[Path]:
    """Write ``version`` to the package's pyproject and its ``__version__`` strings; the
    files changed."""
    pyproject = package_dir / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(_PYPROJECT_VERSION_RE.sub(f'version = "{version}"', text, count=1))
    changed = [pyproject]
    for source in sorted((package_dir / "src").rglob("*.py")):
        text = source.read_text()
        if _DUNDER_VERSION_RE.search(text):
            source.write_text(_DUNDER_VERSION_RE.sub(
                lambda m: f'__version__{m.group(1) or ""} = "{version}"', text))
            changed.append(source)
    return changed


def build(repo: Path, commit: str, stage: str, out: Path) -> list[Path]:
    """Build the wheel and sdist of ``packages/STAGE`` at ``commit`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", "--format=tar", commit, f"packages/{stage}"],
                             cwd=repo, capture_output=True, check=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        hooks = ("import sys, hatchling.build as b\n"
                 "print(b.build_wheel(sys.argv[1])); print(b.build_sdist(sys.argv[1]))")
        proc = subprocess.run([sys.executable, "-c", hooks, str(out.resolve())],
                              cwd=Path(tmp) / "packages" / stage, capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            raise ReleaseError(f"building ember-{stage} at {commit[:12]} failed:\n{proc.stderr}")
    return [out / name for name in proc.stdout.split()]


def release(repo: Path, stage: str, version: str, date: str, do_build: bool = True) -> Release:
    """Release ``ember-STAGE`` ``version`` in the git checkout ``repo`` (see the module
    docstring for the steps).

    Returns:
        The recorded :class:`Release`.

    Raises:
        ReleaseError: for an unknown stage, a bad or not greater version, a dirty package,
            an empty Unreleased section, or a failed git command or build.
    """
    package = distribution(stage)
    new = parse_version(version)
    package_dir = repo / "packages" / stage
    releases_path = repo / RELEASES_FILE
    dirty = git(repo, "status", "--porcelain", "--", f"packages/{stage}", RELEASES_FILE)
    if dirty.strip():
        raise ReleaseError(f"uncommitted changes in packages/{stage} or {RELEASES_FILE}; "
                           f"commit them first:\n{dirty}")
    current = pyproject_version(package_dir / "pyproject.toml")
    last = last_release(read_releases(releases_path), package)
    floor = max([parse_version(current)] + ([parse_version(last.version)] if last else []))
    if new <= floor:
        raise ReleaseError(f"{package} {version} is not greater than {package} "
                           f"{'.'.join(map(str, floor))} (the current or last released version)")
    changelog = package_dir / "CHANGELOG.md"
    changelog.write_text(move_unreleased(changelog.read_text(), version, date))
    changed = [changelog, *bump_sources(package_dir, version)]
    paths = [str(p.relative_to(repo)) for p in changed]
    git(repo, "commit", "-q", "-m", f"release {package} {version}", "--", *paths)
    commit = git(repo, "rev-parse", "HEAD").strip()
    if do_build:
        for built in build(repo, commit, stage, repo / "dist"):
            print(f"built {built}")
    entry = Release(package, version, commit, date)
    header = "" if releases_path.exists() else (
        "# Released Ember packages: one [[release]] per (package, version), written by\n"
        "# tools/release.py; `commit` holds the sources the release was built from.\n")
    with releases_path.open("a") as f:
        f.write(f"{header}\n{entry.to_toml()}")
    git(repo, "add", "--", RELEASES_FILE)
    git(repo, "commit", "-q", "-m", f"releases.toml: {package} {version} at {commit[:12]}",
        "--", RELEASES_FILE)
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", help=f"one of {', '.join(STAGES)}")
    parser.add_argument("version", help="MAJOR.MINOR.PATCH, greater than the last release")
    parser.add_argument("--repo", type=Path, default=ROOT, help="the git checkout (default: this)")
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    parser.add_argument("--no-build", action="store_true", help="record without building")
    args = parser.parse_args(argv)
    try:
        entry = release(args.repo, args.stage, args.version, args.date, not args.no_build)
    except ReleaseError as e:
        print(f"release refused: {e}", file=sys.stderr)
        return 1
    print(f"released {entry.package} {entry.version} at {entry.commit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
