"""Pinned-stage compatibility (issue 14, item 5).

* A deliberate schema minor bump: a copy of ember-runtime whose ``SCHEMA_VERSION`` is one
  minor ahead (with its upgrade step) reads, in another process, a file this runtime
  wrote (upgrading it), and this runtime refuses the file the bumped copy writes, with a
  message that names both versions and says to upgrade ember-runtime.
* ``tools/compat_matrix.py`` with a releases file whose runtime release points at an
  older commit (right after a release, released == current and every combination would
  be one row): the old runtime is built from that commit and installed beside the
  current stages, each imported copy is verified, and the corpus slice runs.
* ``docs/compatibility.md`` was generated from every stage's last release.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ember.runtime.ir import IRFormatError, load, print_program, save, schema
from ember.runtime.ir.graph import InputSpec
from ember.runtime.tracing import GraphRecorder

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import compat_matrix

CASES = ("mlp_gelu_layernorm", "inplace_on_view_of_input")

BUMPED_READER = """
import sys
import ember.runtime.ir.schema as schema
from ember.runtime.ir import load, print_program, save
assert schema.__file__.startswith(sys.argv[1]), schema.__file__
program = load(sys.argv[2])
print(print_program(program))
save(program, sys.argv[3])
"""


def _bumped_runtime(tmp_path: Path) -> tuple[Path, tuple[int, int]]:
    """A copy of this runtime's sources at the next schema minor, whose upgrade step from
    the current minor reports itself on stderr."""
    src = tmp_path / "bumped" / "src"
    shutil.copytree(ROOT / "packages" / "runtime" / "src", src,
                    ignore=shutil.ignore_patterns("__pycache__"))
    major, minor = schema.SCHEMA_VERSION
    path = src / "ember" / "runtime" / "ir" / "schema.py"
    text, n = re.subn(r"^SCHEMA_VERSION: tuple\[int, int\] = \(\d+, \d+\)",
                      f"SCHEMA_VERSION: tuple[int, int] = ({major}, {minor + 1})",
                      path.read_text(), flags=re.MULTILINE)
    assert n == 1, "SCHEMA_VERSION is no longer declared as this test expects"
    path.write_text(text + (
        f"\n\ndef _test_bump(doc: JSONDoc) -> JSONDoc:\n"
        f"    import sys\n"
        f"    print('upgraded {major}.{minor} -> {major}.{minor + 1}', file=sys.stderr)\n"
        f"    return doc\n\n\nUPGRADERS[({major}, {minor})] = _test_bump\n"))
    return src, (major, minor + 1)


def test_schema_minor_bump_new_reader_upgrades_old_reader_refuses(tmp_path: Path) -> None:
    rec = GraphRecorder()
    x = rec.add_input(torch.randn(3, 4), InputSpec("x"))
    with rec:
        y = torch.relu(x) * 2.0 + x.sum(dim=0)
    program = rec.finish([y])
    save(program, tmp_path / "old.ember")
    src, bumped = _bumped_runtime(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.run([sys.executable, "-c", BUMPED_READER, str(src),
                           str(tmp_path / "old.ember"), str(tmp_path / "new.ember")],
                          env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    major, minor = schema.SCHEMA_VERSION
    assert f"upgraded {major}.{minor} -> {major}.{minor + 1}" in proc.stderr
    assert proc.stdout.strip() == print_program(program).strip()
    newer = f"{bumped[0]}.{bumped[1]}"
    with pytest.raises(IRFormatError, match=(
            rf"schema version {re.escape(newer)} \(written by ember-runtime [^)]+\) is newer "
            rf"than this ember-runtime's {major}\.{minor}; upgrade ember-runtime")):
        load(tmp_path / "new.ember")


def test_check_refuses_a_copy_that_is_not_the_installed_wheel() -> None:
    report = compat_matrix.check('{"expected": {"runtime": "0"}, "cases": []}')
    assert report["imports_verified"] is False
    assert "ember.runtime imported from" in str(report["error"])


def _previous_runtime_commit() -> str:
    """The newest commit before HEAD's runtime sources, whose runtime sources differ
    (its ``.py`` files: the matrix fingerprints those, so a commit that only changed a
    README there counts as the current sources)."""
    out = subprocess.run(["git", "log", "-n", "2", "--format=%H", "HEAD", "--",
                          ":(glob)packages/runtime/src/**/*.py"], cwd=ROOT,
                         capture_output=True, text=True,
                         check=True).stdout.split()
    if len(out) < 2:
        pytest.skip("no older runtime sources in this checkout's history")
    return out[1]


@pytest.mark.slow
def test_matrix_installs_an_older_runtime_release_beside_current_stages(
        tmp_path: Path) -> None:
    old = _previous_runtime_commit()
    releases = tmp_path / "releases.toml"
    releases.write_text(f'[[release]]\npackage = "ember-runtime"\nversion = "0.0.1"\n'
                        f'commit = "{old}"\ndate = "2026-01-01"\n')
    outcomes = compat_matrix.run_matrix(releases, CASES, tmp_path / "work")
    by_cover = {c: o for o in outcomes for c in o.covers}
    assert by_cover["all current"].passed, by_cover["all current"].cases
    older = by_cover["released runtime, current others"]
    assert older.sources[0].label == f"0.0.1 (released @{old[:8]})"
    assert [s.kind for s in older.sources] == ["released", "current", "current", "current"]
    # NOTE: the current stages may use runtime API newer than that commit (their pins
    # say which runtime they need): the matrix then reports the import failure, never
    # a pass; otherwise every case ran on the older runtime
    if older.imports_verified:
        assert set(older.cases) == set(CASES)
    else:
        assert "ImportError" in older.error and not older.passed, older.error
    table = compat_matrix.render(outcomes, releases, CASES)
    (row,) = [line for line in table.splitlines() if "released runtime, current others" in line]
    assert f"| 0.0.1 (released @{old[:8]}) | {older.sources[1].label} |" in row


def test_docs_table_is_generated_from_the_last_releases() -> None:
    last = compat_matrix.last_releases(ROOT / "releases.toml")
    assert last and set(last) <= set(compat_matrix.STAGES)
    text = (ROOT / "docs" / "compatibility.md").read_text()
    for stage, (version, commit) in last.items():
        assert f"{version} (released @{commit[:8]})" in text or (
            f"{version} (current = released @{commit[:8]})" in text), (
            f"ember-{stage} {version} is not in the table")
    assert "FAILS" not in text
