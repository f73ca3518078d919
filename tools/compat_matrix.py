"""Which Ember stage versions work together: ``python tools/compat_matrix.py``.

For each stage, the last release recorded in ``releases.toml`` is built from its commit's
sources (``git archive``) and installed, in a throwaway virtual environment, beside the
current sources of the other three; then the reverse (that stage current, the other three
released). Each distinct combination runs a slice of the integration corpus
(``integration_tests/corpus``) through ``ember.frontend.compile(backend="inductor")`` with
``EMBER_SERIALIZE_BOUNDARIES=1`` and compares with eager. The table goes to
``docs/compatibility.md`` (``--out``).

The throwaway environments have no pip and no torch of their own: torch and the other
third-party packages of this interpreter's ``site-packages`` are reached through a
directory of symbolic links named in a ``.pth`` file, which leaves out this checkout's
editable Ember installs; the Ember wheels go into the environment's own
``site-packages``. Inside, ``--check`` verifies that each ``ember.<stage>`` is imported
from the environment and is byte for byte the sources it was built from, before running
the cases.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("runtime", "frontend", "aot", "inductor")
DEFAULT_CASES = ("mlp_gelu_layernorm", "inplace_on_view_of_input",
                 "views_transpose_matmul_flatten")
_NOT_DEPENDENCIES = ("ember", "_editable_impl_ember", "__editable__", "__pycache__")


@dataclass(frozen=True)
class StageSource:
    """One stage's sources: ``kind`` is ``"current"`` (this checkout) or ``"released"``."""

    stage: str
    kind: str
    version: str
    commit: str | None
    path: Path

    @property
    def label(self) -> str:
        if self.commit is None:
            return f"{self.version} ({self.kind})"
        if self.kind == "current":  # the checkout's sources are those of the last release
            return f"{self.version} (current = released @{self.commit[:8]})"
        return f"{self.version} (released @{self.commit[:8]})"


@dataclass(frozen=True)
class Outcome:
    """One combination's result: ``cases`` maps a case to ``"ok"`` or the error."""

    sources: tuple[StageSource, ...]
    covers: tuple[str, ...]
    imports_verified: bool
    cases: dict[str, str]
    error: str

    @property
    def passed(self) -> bool:
        return self.imports_verified and not self.error and all(
            r == "ok" for r in self.cases.values())


def fingerprint(package_dir: Path) -> str:
    """SHA-256 over the relative paths and bytes of the ``.py`` files under a directory."""
    h = hashlib.sha256()
    for path in sorted(package_dir.rglob("*.py")):
        h.update(str(path.relative_to(package_dir)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _version(pyproject: Path) -> str:
    return str(tomllib.loads(pyproject.read_text())["project"]["version"])


def last_releases(releases_file: Path) -> dict[str, tuple[str, str]]:
    """``stage -> (version, commit)`` of each stage's highest recorded release."""
    entries = tomllib.loads(releases_file.read_text()).get("release", [])
    last: dict[str, tuple[str, str]] = {}
    for entry in entries:
        stage = str(entry["package"]).removeprefix("ember-")
        key = tuple(int(p) for p in str(entry["version"]).split("."))
        if stage not in last or key > tuple(int(p) for p in last[stage][0].split(".")):
            last[stage] = (str(entry["version"]), str(entry["commit"]))
    return last


def released_source(stage: str, version: str, commit: str, work: Path) -> StageSource:
    """Extract ``packages/STAGE`` at ``commit`` under ``work``."""
    dest = work / "src" / f"{stage}-{commit[:12]}"
    if not dest.exists():
        archive = subprocess.run(["git", "archive", "--format=tar", commit, f"packages/{stage}"],
                                 cwd=ROOT, capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(dest, filter="data")
    return StageSource(stage, "released", version, commit, dest / "packages" / stage)


def current_source(stage: str) -> StageSource:
    path = ROOT / "packages" / stage
    return StageSource(stage, "current", _version(path / "pyproject.toml"), None, path)


def build_wheel(source: StageSource, out: Path) -> Path:
    """Build ``source`` into a wheel with hatchling's hook (no isolation, no network)."""
    out.mkdir(parents=True, exist_ok=True)
    hook = "import sys, hatchling.build as b; print(b.build_wheel(sys.argv[1]))"
    proc = subprocess.run([sys.executable, "-c", hook, str(out)], cwd=source.path,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"building {source.stage} {source.label} failed:\n{proc.stderr}")
    return out / proc.stdout.split()[-1]


def dependency_links(work: Path) -> Path:
    """A directory linking every entry of this interpreter's ``site-packages`` except
    Ember's own (torch, numpy, ...), made once under ``work``."""
    links = work / "site-deps"
    if not links.exists():
        links.mkdir(parents=True)
        site = Path(sysconfig.get_paths()["purelib"])
        for entry in site.iterdir():
            if not entry.name.startswith(_NOT_DEPENDENCIES) and entry.suffix != ".pth":
                (links / entry.name).symlink_to(entry)
    return links


def make_venv(venv: Path, wheels: list[Path], work: Path) -> Path:
    """A fresh environment at ``venv`` with ``wheels`` installed (no dependencies) and
    this interpreter's third-party packages reachable; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True)
    (Path(site.stdout.strip()) / "_ember_test_deps.pth").write_text(
        f"{dependency_links(work)}\n")
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                        "--no-deps", "--no-index", "--disable-pip-version-check",
                        *map(str, wheels)], check=True, capture_output=True)
    return python


def run_combination(sources: tuple[StageSource, ...], covers: tuple[str, ...],
                    cases: tuple[str, ...], work: Path, wheels: dict[StageSource, Path],
                    index: int) -> Outcome:
    """Install one combination in a throwaway environment and run ``--check`` there."""
    python = make_venv(work / f"venv{index}", [wheels[s] for s in sources], work)
    expected = {s.stage: fingerprint(s.path / "src" / "ember" / s.stage) for s in sources}
    env = {**os.environ, "EMBER_SERIALIZE_BOUNDARIES": "1"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([str(python), str(Path(__file__).resolve()), "--check",
                           json.dumps({"expected": expected, "cases": list(cases)})],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    try:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return Outcome(sources, covers, False, {}, f"check crashed: {proc.stderr[-2000:]}")
    return Outcome(sources, covers, report["imports_verified"], report["cases"],
                   report["error"])


def combinations(released: dict[str, StageSource],
                 current: dict[str, StageSource]) -> list[tuple[tuple[StageSource, ...], str]]:
    """(sources, what it stands for): every stage released beside the others current,
    then every stage current beside the others released."""
    combos = [(tuple(current[s] for s in STAGES), "all current")]
    for stage in STAGES:
        if stage in released:
            combos.append((tuple(released[s] if s == stage else current[s] for s in STAGES),
                           f"released {stage}, current others"))
    for stage in STAGES:
        combos.append((tuple(current[s] if s == stage else released.get(s, current[s])
                             for s in STAGES), f"current {stage}, released others"))
    return combos


def run_matrix(releases_file: Path, cases: tuple[str, ...], work: Path) -> list[Outcome]:
    """Every distinct combination of :func:`combinations` (two that install the same
    sources run once), built and run under ``work``."""
    last = last_releases(releases_file)
    current = {s: current_source(s) for s in STAGES}
    released = {s: released_source(s, v, c, work) for s, (v, c) in last.items()}
    for stage, source in released.items():
        if fingerprint(source.path / "src") == fingerprint(current[stage].path / "src"):
            current[stage] = dataclasses.replace(current[stage], commit=source.commit)
    prints = {src: fingerprint(src.path / "src")
              for src in [*current.values(), *released.values()]}
    distinct: dict[tuple[str, ...], tuple[tuple[StageSource, ...], list[str]]] = {}
    for sources, what in combinations(released, current):
        key = tuple(prints[s] for s in sources)
        distinct.setdefault(key, (sources, []))[1].append(what)
    wheels: dict[StageSource, Path] = {}
    for sources, _ in distinct.values():
        for s in sources:
            if s not in wheels:
                wheels[s] = build_wheel(s, work / "wheels" / f"{s.stage}-{s.kind}-{s.commit}")
    return [run_combination(sources, tuple(covers), cases, work, wheels, i)
            for i, (sources, covers) in enumerate(distinct.values())]


def render(outcomes: list[Outcome], releases_file: Path, cases: tuple[str, ...]) -> str:
    """The Markdown table of ``docs/compatibility.md``."""
    head = ["| combination | " + " | ".join(f"ember-{s}" for s in STAGES) + " | result |",
            "|---|" + "---|" * len(STAGES) + "---|"]
    rows = []
    for o in outcomes:
        if o.passed:
            result = f"works ({len(o.cases)}/{len(o.cases)} cases)"
        else:
            failed = [f"{c}: {r}" for c, r in o.cases.items() if r != "ok"]
            reasons = [o.error] if o.error else []
            if not o.imports_verified:
                reasons.insert(0, "installed copy not verified")
            result = "FAILS: " + "; ".join(reasons + failed).replace("|", "/").replace("\n", " ")
        rows.append(f"| {'; '.join(o.covers)} | "
                    + " | ".join(s.label for s in o.sources) + f" | {result} |")
    return "\n".join([
        "# Compatibility of Ember stage versions",
        "",
        ("Generated by `python tools/compat_matrix.py` (do not edit by hand); "
         f"releases from `{releases_file.name}`."),
        "",
        "Each row installs one combination of stage versions, from wheels, in a throwaway",
        "virtual environment and compiles the integration-corpus cases",
        ", ".join(f"`{c}`" for c in cases),
        "with `backend=\"inductor\"` and `EMBER_SERIALIZE_BOUNDARIES=1`, comparing with eager.",
        "*released* is the stage built from the commit of its last release in `releases.toml`,",
        "*current* the sources of this checkout (*current = released* where they are the",
        "released sources). Combinations that install the same sources are one row.",
        "Stages run in one process, so every `.ember` boundary file is written and read by",
        "the same `ember-runtime`; reading files across runtime versions is covered by the",
        "schema-version test in `integration_tests/test_compat_matrix.py`. Right after a",
        "release, released and current are the same sources and the table has one row; the",
        "test also runs the matrix with an older runtime commit to exercise the mechanism.",
        "",
        *head,
        *rows,
        "",
    ])


def check(spec: str) -> dict[str, object]:
    """Inside a throwaway environment: verify the imported copies, run the cases."""
    import copy
    import importlib
    import importlib.metadata

    request = json.loads(spec)
    result: dict[str, object] = {"imports_verified": False, "cases": {}, "error": ""}
    for stage, expected in request["expected"].items():
        module = importlib.import_module(f"ember.{stage}")
        where = Path(module.__file__ or "").parent
        if not str(where).startswith(sys.prefix) or fingerprint(where) != expected:
            result["error"] = f"ember.{stage} imported from {where}, not the installed wheel"
            return result
    result["imports_verified"] = True
    sys.path.insert(0, str(ROOT / "integration_tests"))
    import ember.frontend
    import torch
    from corpus import CASES

    by_name = {c.name: c for c in CASES}
    outcomes: dict[str, str] = {}
    for name in request["cases"]:
        case = by_name[name]
        try:
            torch.manual_seed(0)
            fn = case.build()
            args, kwargs = case.inputs()
            fresh = copy.deepcopy((fn, args, kwargs))
            expected_out = fn(*args, **kwargs)
            compiled = ember.frontend.compile(fresh[0], backend="inductor")
            actual = compiled(*fresh[1], **fresh[2])
            outcomes[name] = _compare((actual, fresh[1]), (expected_out, args))
        except Exception as e:  # noqa: BLE001 - a failure of any kind is a table entry
            outcomes[name] = f"{type(e).__name__}: {str(e)[:200]}"
    result["cases"] = outcomes
    return result


def _leaves(tree: object) -> list[object]:
    if isinstance(tree, (list, tuple)):
        return [leaf for item in tree for leaf in _leaves(item)]
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in _leaves(tree[key])]
    return [tree]


def _compare(actual: object, expected: object) -> str:
    import torch

    got, want = _leaves(actual), _leaves(expected)
    if len(got) != len(want):
        return f"{len(got)} outputs, eager has {len(want)}"
    for i, (a, e) in enumerate(zip(got, want)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor) or not torch.allclose(a, e, rtol=1e-4, atol=1e-5):
                return f"output {i} differs from eager"
        elif a != e:
            return f"output {i}: {a!r} != {e!r}"
    return "ok"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=Path, default=ROOT / "releases.toml")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "compatibility.md")
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES))
    parser.add_argument("--work", type=Path, help="keep the builds and venvs here")
    parser.add_argument("--check", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.check is not None:
        print(json.dumps(check(args.check)))
        return 0
    cases = tuple(c for c in args.cases.split(",") if c)
    with tempfile.TemporaryDirectory(prefix="ember-compat-") as tmp:
        work = args.work or Path(tmp)
        outcomes = run_matrix(args.releases, cases, work)
    args.out.write_text(render(outcomes, args.releases, cases))
    print(args.out.read_text())
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
