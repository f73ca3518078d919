"""The C++ kernels' cache keys need the compiler's version line and whether libmvec is
installed (``cpp_build._toolchain``): asked once per process, and remembered across
processes in ``<cache>/toolchain/cpp.json`` with the stamps of the compiler's binary and
of ``/etc/ld.so.cache``, so that a warm start spawns neither ``g++ --version`` nor
``ldconfig -p``. A changed compiler is asked again; a bad record is ignored."""

from __future__ import annotations

import ctypes.util
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from ember.runtime.compiled import cpp_build
from ember.runtime.compiled.cpp_build import CppCompileError, Toolchain
from ember.runtime.config import patch

MVEC = ("-DEMBER_HAVE_MVEC", "-lmvec")
needs_compiler = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")


@pytest.fixture(autouse=True)
def fresh_process() -> Iterator[None]:
    """Forget this process's answer before and after each test."""
    cpp_build._toolchain.cache_clear()
    yield
    cpp_build._toolchain.cache_clear()


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The subprocesses the toolchain asks (``find_library`` answers "found")."""
    calls: list[str] = []
    real_run = subprocess.run

    def run(args: list[str], *a: Any, **k: Any) -> Any:
        calls.append(" ".join(args))
        return real_run(args, *a, **k)

    def find_library(name: str) -> str:
        calls.append(f"find_library {name}")
        return "libmvec.so.1"

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(ctypes.util, "find_library", find_library)
    return calls


@pytest.fixture
def fake_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``g++`` first on PATH that prints a version line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    compiler = bin_dir / "g++"
    compiler.write_text("#!/bin/sh\necho 'g++ (Fake) 1.0'\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return compiler


def _record(root: Path) -> Path:
    return root / "toolchain" / "cpp.json"


def _new_process() -> Toolchain:
    cpp_build._toolchain.cache_clear()
    return cpp_build._toolchain()


def test_a_warm_process_reads_the_record_and_spawns_nothing(
        tmp_path: Path, fake_compiler: Path, spawned: list[str]) -> None:
    with patch(cache_dir=tmp_path / "cache"):
        assert cpp_build.compiler_version() == "g++ (Fake) 1.0"
        assert cpp_build.vector_math_flags() == MVEC
        assert spawned == ["g++ --version", "find_library mvec"]  # once per process
        record = json.loads(_record(tmp_path / "cache").read_bytes())
        assert record["compiler"] == "g++ (Fake) 1.0"
        assert record["stamps"]["compiler"][0] == str(fake_compiler.resolve())
        assert oct(_record(tmp_path / "cache").stat().st_mode & 0o777) == oct(0o600)
        spawned.clear()
        assert _new_process() == Toolchain("g++ (Fake) 1.0", MVEC)
        assert spawned == []


def test_a_changed_compiler_is_asked_again(tmp_path: Path, fake_compiler: Path,
                                           spawned: list[str]) -> None:
    with patch(cache_dir=tmp_path / "cache"):
        assert _new_process().compiler_version == "g++ (Fake) 1.0"
        fake_compiler.write_text("#!/bin/sh\necho 'g++ (Fake) 2.0 upgraded'\n")
        spawned.clear()
        assert _new_process().compiler_version == "g++ (Fake) 2.0 upgraded"
        assert spawned == ["g++ --version", "find_library mvec"]
        spawned.clear()
        assert _new_process().compiler_version == "g++ (Fake) 2.0 upgraded"
        assert spawned == []


def test_another_compiler_first_on_path_is_asked(tmp_path: Path, fake_compiler: Path,
                                                 spawned: list[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with patch(cache_dir=tmp_path / "cache"):
        _new_process()
        other = tmp_path / "other"
        other.mkdir()
        shutil.copy2(fake_compiler, other / "g++")  # same bytes and times, other file
        monkeypatch.setenv("PATH", f"{other}{os.pathsep}{os.environ['PATH']}")
        spawned.clear()
        _new_process()
        assert spawned[0] == "g++ --version"


def test_a_changed_library_cache_is_asked_again(
        tmp_path: Path, fake_compiler: Path, spawned: list[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    ld_cache = tmp_path / "ld.so.cache"
    ld_cache.write_bytes(b"one")
    monkeypatch.setattr(cpp_build, "LD_CACHE", str(ld_cache))
    with patch(cache_dir=tmp_path / "cache"):
        _new_process()
        ld_cache.write_bytes(b"two, after ldconfig")
        spawned.clear()
        _new_process()
        assert spawned == ["g++ --version", "find_library mvec"]


@pytest.mark.parametrize("text", [b"", b"{not json", b"[]", b'{"stamps": 1}'])
def test_a_bad_record_is_ignored_and_rewritten(tmp_path: Path, fake_compiler: Path,
                                               spawned: list[str], text: bytes) -> None:
    with patch(cache_dir=tmp_path / "cache"):
        _new_process()
        _record(tmp_path / "cache").write_bytes(text)
        spawned.clear()
        assert _new_process() == Toolchain("g++ (Fake) 1.0", MVEC)
        assert spawned == ["g++ --version", "find_library mvec"]
        assert json.loads(_record(tmp_path / "cache").read_bytes())["compiler"] == (
            "g++ (Fake) 1.0")


def test_a_record_with_a_forged_answer_for_other_stamps_is_ignored(
        tmp_path: Path, fake_compiler: Path, spawned: list[str]) -> None:
    with patch(cache_dir=tmp_path / "cache"):
        _new_process()
        path = _record(tmp_path / "cache")
        record = json.loads(path.read_bytes())
        record["vector_math_flags"] = ["-DEVIL"]
        path.write_text(json.dumps(record))
        assert _new_process().vector_math_flags == MVEC


def test_a_linked_record_is_not_followed(tmp_path: Path, fake_compiler: Path,
                                         spawned: list[str]) -> None:
    with patch(cache_dir=tmp_path / "cache"):
        _new_process()
        path = _record(tmp_path / "cache")
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(elsewhere)
        spawned.clear()
        _new_process()
        assert spawned == ["g++ --version", "find_library mvec"]
        assert not path.is_symlink()  # replaced by a file; the target untouched
        assert json.loads(elsewhere.read_bytes())["compiler"] == "g++ (Fake) 1.0"


def test_no_libmvec_is_not_remembered(tmp_path: Path, fake_compiler: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    with patch(cache_dir=tmp_path / "cache"):
        assert _new_process() == Toolchain("g++ (Fake) 1.0", ())
        assert not _record(tmp_path / "cache").exists()


def test_a_disabled_cache_remembers_nothing(tmp_path: Path, fake_compiler: Path,
                                            spawned: list[str]) -> None:
    with patch(cache_dir=tmp_path / "cache", cache_enabled=False):
        assert _new_process() == Toolchain("g++ (Fake) 1.0", MVEC)
    assert not (tmp_path / "cache").exists()


def test_a_cache_dir_that_is_not_private_asks_the_system(
        tmp_path: Path, fake_compiler: Path, spawned: list[str]) -> None:
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    with patch(cache_dir=root):
        assert _new_process() == Toolchain("g++ (Fake) 1.0", MVEC)
    assert list(root.iterdir()) == []


def test_no_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libmvec.so.1")
    with patch(cache_dir=tmp_path / "cache"):
        with pytest.raises(CppCompileError, match="no C\\+\\+ compiler"):
            cpp_build.compiler_version()
        assert cpp_build.vector_math_flags() == MVEC
        assert not _record(tmp_path / "cache").exists()


@needs_compiler
def test_cache_keys_are_those_of_the_subprocesses(tmp_path: Path) -> None:
    """Remembering changes no key: entries built before stay valid."""
    out = subprocess.run(["g++", "--version"], capture_output=True, text=True, check=True)
    flags = MVEC if ctypes.util.find_library("mvec") else ()
    h = hashlib.sha256()
    for part in ("int x;", out.stdout.splitlines()[0], " ".join(cpp_build.FLAGS + flags),
                 cpp_build.host_cpu(), torch.__version__):
        h.update(part.encode())
        h.update(b"\0")
    with patch(cache_dir=tmp_path / "cache"):
        assert cpp_build.cache_key("int x;") == h.hexdigest()  # asked (and remembered)
        assert _new_process() == Toolchain(out.stdout.splitlines()[0], flags)
        assert cpp_build.cache_key("int x;") == h.hexdigest()  # read back
