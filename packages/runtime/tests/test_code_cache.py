"""The wrapper code cache (``compiled/code_cache.py``): a wrapper is compiled once, its
code object read back with marshal afterwards; a corrupt, truncated or linked entry is a
miss with a warning and is removed; every other failure falls back to ``compile()``;
tracebacks from cached wrapper code name the same file and lines as a fresh compile."""

from __future__ import annotations

import importlib.util
import os
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import CodeType

import pytest
import torch
from ember.runtime.compiled import code_cache
from ember.runtime.compiled.code_cache import CodeCacheWarning, entry_key, wrapper_code
from ember.runtime.compiled.loader import load_executor
from ember.runtime.config import patch
from handbuilt import wrapper_program

NAME = "<ember wrapper forward>"
SOURCE = ("def call(args):\n"
          "    x = args[0]\n"
          "    return [x * 2]\n")
RAISES_AT = 4
FAILING = ("def helper(x):\n"
           "    return x\n"
           "def call(args):\n"
           "    raise RuntimeError('from the wrapper')\n")


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Path]:
    """A fresh cache root, with the ``cache`` log on; yields the code cache's folder."""
    with patch(cache_dir=tmp_path / "cache", logs=frozenset({"cache"})):
        yield tmp_path / "cache" / code_cache.SUBDIR


@pytest.fixture
def no_warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def _entry(folder: Path, source: str = SOURCE, name: str = NAME) -> Path:
    return folder / f"{entry_key(source, name)}{code_cache.SUFFIX}"


def _forbid_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(source: str, filename: str) -> CodeType:
        raise AssertionError("compiled although the entry is in the cache")
    monkeypatch.setattr(code_cache, "compile_source", refuse)


def _run(code: CodeType) -> object:
    namespace: dict[str, object] = {}
    exec(code, namespace)  # noqa: S102 - the test's own source
    call = namespace["call"]
    assert callable(call)
    return call([3])


# ---- hit and miss ---------------------------------------------------------------------


def test_a_miss_compiles_and_stores_then_a_hit_reads_without_compiling(
        cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        no_warnings: None) -> None:
    first = wrapper_code(SOURCE, NAME)
    assert _run(first) == [6]
    assert "wrapper code cache miss" in capsys.readouterr().err
    entry = _entry(cache)
    assert entry.is_file() and oct(entry.stat().st_mode & 0o777) == oct(0o600)
    assert oct(cache.stat().st_mode & 0o777) == oct(0o700)
    assert [p.name for p in cache.iterdir()] == [entry.name]  # no temporary file left
    _forbid_compile(monkeypatch)
    again = wrapper_code(SOURCE, NAME)
    assert "wrapper code cache hit" in capsys.readouterr().err
    assert again is not first and again == first
    assert again.co_filename == NAME and _run(again) == [6]


def test_the_key_covers_source_name_and_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    key = entry_key(SOURCE, NAME)
    assert entry_key(SOURCE, NAME) == key
    assert entry_key(SOURCE + "\n", NAME) != key
    assert entry_key(SOURCE, "<ember wrapper backward>") != key
    monkeypatch.setattr(importlib.util, "MAGIC_NUMBER", b"\x00\x00\r\n")
    assert entry_key(SOURCE, NAME) != key


def test_another_name_is_another_entry(cache: Path, no_warnings: None) -> None:
    forward = wrapper_code(SOURCE, NAME)
    backward = wrapper_code(SOURCE, "<ember wrapper backward>")
    assert (forward.co_filename, backward.co_filename) == (NAME, "<ember wrapper backward>")
    assert len(list(cache.iterdir())) == 2


def test_wrappers_keep_the_annotations_future_flag(cache: Path) -> None:
    source = "def call(args: UndefinedName) -> list:\n    return args\n"
    for _ in range(2):  # compiled, then read back
        assert _run(wrapper_code(source, NAME)) == [3]


def test_a_syntax_error_is_raised_as_by_compile(cache: Path) -> None:
    with pytest.raises(SyntaxError):
        wrapper_code("def call(args)\n", NAME)
    assert not cache.exists() or not list(cache.iterdir())


# ---- corrupt entries ------------------------------------------------------------------


def _truncated(data: bytes) -> bytes:
    return data[:-7]


def _flipped(data: bytes) -> bytes:
    return data[:-3] + bytes([data[-3] ^ 0xFF]) + data[-2:]


def _no_magic(data: bytes) -> bytes:
    return b"x" + data[1:]


def _other_key(data: bytes) -> bytes:
    code = code_cache.compile_source(SOURCE, NAME)
    return code_cache.encode("0" * 64, code)


def _other_name(data: bytes) -> bytes:
    code = code_cache.compile_source(SOURCE, "<elsewhere>")
    return code_cache.encode(entry_key(SOURCE, NAME), code)


def _empty(data: bytes) -> bytes:
    return b""


@pytest.mark.parametrize("damage", [_truncated, _flipped, _no_magic, _other_key,
                                    _other_name, _empty])
def test_a_corrupt_entry_warns_is_removed_and_compiled_again(
        cache: Path, damage: Callable[[bytes], bytes]) -> None:
    wrapper_code(SOURCE, NAME)
    entry = _entry(cache)
    entry.write_bytes(damage(entry.read_bytes()))
    with pytest.warns(CodeCacheWarning, match="corrupt wrapper code cache entry"):
        code = wrapper_code(SOURCE, NAME)
    assert _run(code) == [6] and code.co_filename == NAME
    # the entry was replaced by a sound one
    assert code_cache.decode(entry.read_bytes(), entry_key(SOURCE, NAME), NAME) == code


def test_a_marshalled_value_that_is_no_code_is_corrupt(cache: Path) -> None:
    import hashlib
    import json
    import marshal

    payload = marshal.dumps({"not": "code"})
    key = entry_key(SOURCE, NAME)
    header = {"format": code_cache.FORMAT, "key": key,
              "sha256": hashlib.sha256(payload).hexdigest()}
    cache.mkdir(parents=True)
    cache.parent.chmod(0o700)
    cache.chmod(0o700)
    _entry(cache).write_bytes(code_cache.MAGIC + json.dumps(header).encode() + b"\n"
                              + payload)
    with pytest.warns(CodeCacheWarning, match="not the code object"):
        assert _run(wrapper_code(SOURCE, NAME)) == [6]


def test_a_linked_entry_is_removed_not_followed(cache: Path, tmp_path: Path) -> None:
    wrapper_code(SOURCE, NAME)
    entry = _entry(cache)
    elsewhere = tmp_path / "elsewhere.code"
    elsewhere.write_bytes(entry.read_bytes())  # even a valid entry is not read through
    entry.unlink()
    entry.symlink_to(elsewhere)
    with pytest.warns(CodeCacheWarning, match="symbolic link"):
        assert _run(wrapper_code(SOURCE, NAME)) == [6]
    assert not entry.is_symlink() and entry.is_file()
    assert elsewhere.read_bytes() == entry.read_bytes()  # the target is untouched


def test_a_directory_in_place_of_an_entry_is_replaced(cache: Path) -> None:
    wrapper_code(SOURCE, NAME)
    entry = _entry(cache)
    entry.unlink()
    (entry / "inside").mkdir(parents=True)
    with pytest.warns(CodeCacheWarning):
        assert _run(wrapper_code(SOURCE, NAME)) == [6]
    assert entry.is_file()


# ---- fallbacks ------------------------------------------------------------------------


def test_a_cache_dir_that_is_not_private_falls_back_to_compile(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], no_warnings: None) -> None:
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    with patch(cache_dir=root, logs=frozenset({"cache"})):
        assert _run(wrapper_code(SOURCE, NAME)) == [6]
    assert "wrapper code cache not used" in capsys.readouterr().err
    assert list(root.iterdir()) == []


def test_a_failed_write_falls_back_to_compile(
        cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        no_warnings: None) -> None:
    def full(path: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(code_cache, "write_atomic", full)
    assert _run(wrapper_code(SOURCE, NAME)) == [6]
    assert "wrapper code not stored" in capsys.readouterr().err
    assert list(cache.iterdir()) == []


def test_an_unreadable_entry_is_a_miss(cache: Path) -> None:
    if os.getuid() == 0:
        pytest.skip("root reads files whatever their mode")
    wrapper_code(SOURCE, NAME)
    _entry(cache).chmod(0)
    with pytest.warns(CodeCacheWarning, match="unreadable"):
        assert _run(wrapper_code(SOURCE, NAME)) == [6]


def test_a_disabled_cache_reads_and_writes_nothing(
        tmp_path: Path, no_warnings: None) -> None:
    with patch(cache_dir=tmp_path / "cache", cache_enabled=False):
        assert _run(wrapper_code(SOURCE, NAME)) == [6]
        assert _run(wrapper_code(SOURCE, NAME)) == [6]
    assert not (tmp_path / "cache").exists()


# ---- tracebacks through the loader ----------------------------------------------------


def _failing_frame(source: str) -> tuple[str, int | None, str]:
    run = load_executor(wrapper_program(source))
    with pytest.raises(RuntimeError, match="from the wrapper") as e:
        run([torch.randn(3)])
    frame = traceback.extract_tb(e.value.__traceback__)[-1]
    return frame.filename, frame.lineno, frame.name


def test_tracebacks_from_cached_wrappers_show_the_same_file_and_line(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    namespace: dict[str, object] = {}
    exec(compile(FAILING, NAME, "exec"), namespace)  # noqa: S102 - what it was before
    call = namespace["call"]
    assert callable(call)
    with pytest.raises(RuntimeError) as e:
        call([])
    plain = traceback.extract_tb(e.value.__traceback__)[-1]
    expected = (NAME, RAISES_AT, "call")
    assert (plain.filename, plain.lineno, plain.name) == expected
    assert _failing_frame(FAILING) == expected  # a miss: compiled and stored
    assert _entry(cache, FAILING).is_file()
    _forbid_compile(monkeypatch)
    assert _failing_frame(FAILING) == expected  # a hit: read back


def test_the_loader_runs_cached_wrappers(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                         no_warnings: None) -> None:
    source = "def call(args):\n    return [args[0] * 2]\n"
    x = torch.randn(3)
    torch.testing.assert_close(load_executor(wrapper_program(source))([x])[0], x * 2)
    _forbid_compile(monkeypatch)
    torch.testing.assert_close(load_executor(wrapper_program(source))([x])[0], x * 2)
