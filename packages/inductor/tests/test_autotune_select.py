"""ember.inductor.autotune: select() off and on, the on-disk decision cache (hits in a
warm process, corrupt / linked / foreign entries, keys over device and versions), failing
candidates, the progress bar and the log lines; which modes autotune."""

from __future__ import annotations

import io
import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from ember.inductor import autotune
from ember.inductor.autotune import (
    AutotuneCacheWarning,
    AutotuneWarning,
    Candidate,
    autotune_enabled,
    autotuning,
    select,
    tuning_report,
)
from ember.inductor.autotune import cache as autotune_cache
from ember.inductor.autotune.progress import Progress
from ember.inductor.compile import autotunes
from ember.runtime import pipeline
from ember.runtime.config import patch

KEY = {"m": 64, "n": 32, "dtype": "float16", "strides": [[32, 1], [1, 64]]}


@pytest.fixture(autouse=True)
def cache_root(tmp_path: Path) -> Iterator[Path]:
    """Each test gets an empty cache root."""
    with patch(cache_dir=tmp_path / "cache", cache_enabled=True):
        yield tmp_path / "cache"


class Runners:
    """Candidates whose runners sleep for given times, counting builds and runs."""

    def __init__(self, **seconds: float | Exception) -> None:
        self.seconds = seconds
        self.built: Counter[str] = Counter()
        self.ran: Counter[str] = Counter()

    def candidates(self) -> list[Candidate]:
        return [Candidate(name, self._maker(name)) for name in self.seconds]

    def _maker(self, name: str) -> Callable[[], Callable[[], None]]:
        def make() -> Callable[[], None]:
            self.built[name] += 1
            value = self.seconds[name]
            if isinstance(value, ValueError):
                raise value  # fails to build

            def run() -> None:
                self.ran[name] += 1
                if isinstance(value, Exception):
                    raise value  # fails to run
                time.sleep(value)

            return run

        return make


def test_off_returns_the_default_without_building_anything(cache_root: Path) -> None:
    runners = Runners(slow=0.05, fast=0.0)
    assert not autotune_enabled()
    assert select("mm", KEY, runners.candidates(), default="slow") == "slow"
    with autotuning(False):
        assert select("mm", KEY, runners.candidates(), default="slow") == "slow"
    assert runners.built == Counter()
    assert not cache_root.exists()


def test_on_times_every_candidate_and_stores_the_fastest(cache_root: Path) -> None:
    runners = Runners(slow=0.05, fast=0.0, medium=0.025)
    with autotuning(True):
        assert autotune_enabled()
        assert select("mm", KEY, runners.candidates(), default="slow") == "fast"
        assert tuning_report().to_json() == {"benchmarked": 1, "cached": 0, "failed": 0,
                                             "defaulted": 0}
    assert runners.built == Counter(slow=1, fast=1, medium=1)
    (entry,) = (cache_root / "autotune").iterdir()
    assert re.fullmatch(r"mm-[0-9a-f]{64}\.json", entry.name)
    data = json.loads(entry.read_text())
    assert (data["format"], data["kind"], data["key"], data["choice"]) == (
        1, "mm", KEY, "fast")
    assert data["device"] == {"type": "cpu"}
    assert set(data["versions"]) == {"torch", "triton", "ember-inductor"}
    assert sorted(data["timings_ms"]) == ["fast", "medium", "slow"]
    assert data["timings_ms"]["fast"] < data["timings_ms"]["slow"]
    assert os.stat(entry).st_mode & 0o077 == 0  # private, like the kernel cache


def test_a_warm_process_does_not_time_again() -> None:
    runners = Runners(slow=0.05, fast=0.0)
    with autotuning(True):
        assert select("mm", KEY, runners.candidates(), default="slow") == "fast"
    with autotuning(True):
        assert select("mm", dict(reversed(KEY.items())), runners.candidates(),
                      default="slow") == "fast"  # key order does not matter
        assert tuning_report().to_json() == {"benchmarked": 0, "cached": 1, "failed": 0,
                                             "defaulted": 0}
    assert runners.built == Counter(slow=1, fast=1)  # make_runner not called again


def test_other_keys_kinds_devices_and_versions_are_misses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runners = Runners(slow=0.03, fast=0.0)
    with autotuning(True):
        select("mm", KEY, runners.candidates(), default="slow")
        select("mm", {**KEY, "m": 65}, runners.candidates(), default="slow")
        select("bmm", KEY, runners.candidates(), default="slow")
        monkeypatch.setattr(autotune_cache, "versions",
                            lambda: {"torch": "9.9", "triton": "9.9", "ember-inductor": "9"})
        select("mm", KEY, runners.candidates(), default="slow")
        monkeypatch.setattr(autotune_cache, "device_description",
                            lambda device: {"type": "cuda", "name": "other GPU",
                                            "capability": [8, 0]})
        select("mm", KEY, runners.candidates(), default="slow")
        assert tuning_report().benchmarked == 5
    assert runners.built == Counter(slow=5, fast=5)


def test_a_failing_candidate_is_skipped_and_logged(capsys: pytest.CaptureFixture[str]) -> None:
    runners = Runners(broken_build=ValueError("no shared memory"),
                      broken_run=RuntimeError("illegal address"), slow=0.03, ok=0.0)
    with patch(logs="autotune"), autotuning(True):
        assert select("mm", KEY, runners.candidates(), default="slow") == "ok"
        assert tuning_report().failed == 2
    err = capsys.readouterr().err
    assert "[ember.autotune] mm: candidate broken_build failed (ValueError: no shared " \
           "memory); skipped" in err
    assert "candidate broken_run failed (RuntimeError: illegal address); skipped" in err
    line = next(x for x in err.splitlines() if x.startswith("[ember.autotune] mm {"))
    assert re.fullmatch(
        r'\[ember\.autotune\] mm \{"dtype":"float16","m":64,"n":32,"strides":\[\[32,1\],'
        r'\[1,64\]\]\}: ok \(broken_build failed \(ValueError: no shared memory\), '
        r'broken_run failed \(RuntimeError: illegal address\), slow \d+\.\d{4} ms, '
        r'ok \d+\.\d{4} ms\)', line), line


def test_all_failing_keeps_the_default_with_a_warning(cache_root: Path) -> None:
    runners = Runners(a=ValueError("a"), b=RuntimeError("b"))
    with autotuning(True):
        with pytest.warns(AutotuneWarning, match=r"autotune mm .*every candidate failed "
                                                 r".*using the default 'a'"):
            assert select("mm", KEY, runners.candidates(), default="a") == "a"
        assert tuning_report().defaulted == 1
    assert not any((cache_root / "autotune").iterdir())  # nothing stored: times again


def _stored_entry(cache_root: Path) -> Path:
    with autotuning(True):
        select("mm", KEY, Runners(slow=0.03, fast=0.0).candidates(), default="slow")
    (entry,) = (cache_root / "autotune").iterdir()
    return entry


@pytest.mark.parametrize(("damage", "message"), [
    (lambda p: p.write_text("{not json"), "is unreadable"),
    (lambda p: p.write_text(json.dumps({"format": 1})), "holds the decision of another key"),
    (lambda p: p.write_text(p.read_text().replace('"m": 64', '"m": 63')),
     "holds the decision of another key"),
    (lambda p: p.write_text(p.read_text().replace('"choice": "fast"', '"choice": 3')),
     "has no choice"),
    (lambda p: p.write_text("[]"), "is not a format-1 autotune entry"),
])
def test_a_corrupt_entry_is_a_miss_with_a_warning(
        cache_root: Path, damage: Callable[[Path], object], message: str) -> None:
    entry = _stored_entry(cache_root)
    damage(entry)
    runners = Runners(slow=0.03, fast=0.0)
    with autotuning(True), pytest.warns(AutotuneCacheWarning, match=message):
        assert select("mm", KEY, runners.candidates(), default="slow") == "fast"
    assert runners.built == Counter(slow=1, fast=1)
    assert json.loads(entry.read_text())["choice"] == "fast"  # written again


def test_a_linked_entry_is_removed_not_followed(cache_root: Path, tmp_path: Path) -> None:
    entry = _stored_entry(cache_root)
    target = tmp_path / "elsewhere.json"
    original = entry.read_text()
    target.write_text(original)
    entry.unlink()
    entry.symlink_to(target)
    with autotuning(True), pytest.warns(AutotuneCacheWarning, match="is a symbolic link"):
        select("mm", KEY, Runners(slow=0.03, fast=0.0).candidates(), default="slow")
    assert not entry.is_symlink() and target.read_text() == original  # target untouched


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_another_users_entry_is_a_miss(cache_root: Path) -> None:
    entry = _stored_entry(cache_root)
    os.chown(entry, 1, 1)
    runners = Runners(slow=0.03, fast=0.0)
    with autotuning(True), pytest.warns(AutotuneCacheWarning, match="belongs to another user"):
        select("mm", KEY, runners.candidates(), default="slow")
    assert runners.built == Counter(slow=1, fast=1)
    assert os.stat(entry).st_uid == os.getuid()


def test_a_cached_choice_that_is_no_candidate_times_again(cache_root: Path) -> None:
    _stored_entry(cache_root)
    runners = Runners(slow=0.03, faster=0.0)
    with autotuning(True):
        assert select("mm", KEY, runners.candidates(), default="slow") == "faster"
    assert runners.built == Counter(slow=1, faster=1)


def test_clear_cache(cache_root: Path) -> None:
    _stored_entry(cache_root)
    assert autotune.clear_cache() == 1
    assert not any(autotune.cache_dir().iterdir())


def test_nothing_to_choose_times_nothing() -> None:
    runners = Runners(only=0.0)
    with autotuning(True):
        assert select("pointwise", KEY, runners.candidates(), default="only") == "only"
        assert select("pointwise", KEY, [], default="heuristic") == "heuristic"
    assert runners.built == Counter()


def test_bad_arguments_name_the_problem() -> None:
    with autotuning(True):
        with pytest.raises(TypeError, match="autotune key of kind 'mm' must hold JSON "
                                            "values only"):
            select("mm", {"dtype": torch.float16}, Runners(a=0.0, b=0.0).candidates(), "a")
        with pytest.raises(ValueError, match="autotune kind 'Mm/x' is not a lowercase word"):
            select("Mm/x", KEY, Runners(a=0.0, b=0.0).candidates(), "a")
        twice = Runners(a=0.0).candidates() * 2
        with pytest.raises(ValueError, match=r"candidate names are not distinct: \['a', 'a'\]"):
            select("mm", KEY, twice, "b")


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stderr", terminal)
    with autotuning(True):
        select("mm", KEY, Runners(a=0.0, b=0.0).candidates(), default="a")
    frames = terminal.getvalue().split("\r")
    assert frames[1].rstrip() == "autotuning mm 1/2 [                    ] a"
    assert frames[2].rstrip() == "autotuning mm 2/2 [##########          ] b"
    assert frames[3].strip() == "" and frames[-1] == ""  # the line is cleared
    plain = io.StringIO()
    progress = Progress("mm", 2, plain)
    progress.step(0, "a")
    progress.close()
    assert plain.getvalue() == ""


def test_which_modes_autotune() -> None:
    assert [m for m in pipeline.MODE_FEATURES if autotunes(m)] == [
        "max-autotune", "max-autotune-no-cudagraphs"]
    assert not autotunes(None)
    with pytest.raises(ValueError, match="unknown mode 'fastest'"):
        autotunes("fastest")


def test_max_autotune_is_accepted_once_cudagraphs_are_implemented() -> None:
    assert "autotune" in pipeline.IMPLEMENTED_FEATURES
    pipeline.check_mode("max-autotune-no-cudagraphs")
    if "cudagraphs" in pipeline.IMPLEMENTED_FEATURES:
        pipeline.check_mode("max-autotune")
    else:
        with pytest.raises(NotImplementedError, match="missing: cudagraphs"):
            pipeline.check_mode("max-autotune")
