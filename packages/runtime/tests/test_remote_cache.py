"""The remote program cache against a real redis-server: entries shared by two
"machines" (two local cache directories, one server), signatures, a server that is
down, the Redis protocol and the URL. ``test_program_cache_e2e.py`` shares a server
between two processes."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from counting_stage import CountingStage, install_counting_stage
from ember.runtime.__main__ import main as cli_main
from ember.runtime.cache import ProgramCacheWarning, SigningKeyError, stats
from ember.runtime.cache.entry import encode
from ember.runtime.cache.program_cache import close_remotes
from ember.runtime.cache.redis_backend import (
    KEY_PREFIX,
    RedisAddress,
    RedisConnection,
    RedisStore,
    RemoteCacheConfigError,
    redact,
)
from ember.runtime.config import Config, RemoteCacheKeyWarning, patch
from ember.runtime.pipeline import compile_program
from handbuilt import mlp_program
from redis_server import free_port, redis_server

SECRET = "0123456789abcdef-test-secret"


@pytest.fixture
def stage(monkeypatch: pytest.MonkeyPatch) -> CountingStage:
    return install_counting_stage(monkeypatch)


@pytest.fixture(autouse=True)
def _close_remotes() -> Iterator[None]:
    yield
    close_remotes()  # NOTE: each test's server stops with the test


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    directory = tmp_path / "redis"
    directory.mkdir()
    with redis_server(directory) as url:
        yield url


def _machine(tmp_path: Path, name: str, url: str, secret: str | None = SECRET) -> Any:
    return patch(program_cache=True, cache_enabled=True, cache_dir=tmp_path / name,
                 remote_cache=url, remote_cache_key=secret)


def _remote_entries(url: str) -> list[bytes]:
    conn = RedisConnection(RedisAddress.parse(url))
    try:
        reply = conn.command("KEYS", KEY_PREFIX + "*")
    finally:
        conn.close()
    assert isinstance(reply, list)
    return sorted(k for k in reply if isinstance(k, bytes))


def test_a_second_machine_compiles_nothing(stage: CountingStage, server: str,
                                           tmp_path: Path) -> None:
    program, ex = mlp_program()
    hits = (stats().remote_hits, stats().local_hits)
    with _machine(tmp_path, "a", server):
        compile_program(program, "aot_eager")
    (stored,) = _remote_entries(server)
    with _machine(tmp_path, "b", server):
        fn = compile_program(program, "aot_eager")
        assert stage.runs == 1
        assert (tmp_path / "b" / "programs" / f"{stored.decode()[len(KEY_PREFIX):]}.entry"
                ).exists()  # a remote hit is stored locally
        compile_program(program, "aot_eager")
    assert (stats().remote_hits, stats().local_hits) == (hits[0] + 1, hits[1] + 1)
    assert stage.runs == 1
    x = torch.randn(2, 4)
    torch.testing.assert_close(fn([x])[0], torch.relu(x @ ex["w"].T + ex["b"]) * 2)


def test_an_entry_signed_with_another_secret_is_a_miss(stage: CountingStage, server: str,
                                                       tmp_path: Path) -> None:
    program, _ = mlp_program()
    with _machine(tmp_path, "a", server, secret="another-secret-of-16-bytes"):
        compile_program(program, "aot_eager")
    with _machine(tmp_path, "b", server), pytest.warns(
            ProgramCacheWarning, match="remote program cache entry .* not used \\(missing "
                                       "or bad signature"):
        compile_program(program, "aot_eager")
    assert stage.runs == 2


def test_a_tampered_entry_is_rejected(stage: CountingStage, server: str,
                                      tmp_path: Path) -> None:
    program, _ = mlp_program()
    with _machine(tmp_path, "a", server):
        compile_program(program, "aot_eager")
    (name,) = _remote_entries(server)
    key = name.decode()[len(KEY_PREFIX):]
    evil = program.copy()
    evil.dialect = "core-functional"
    evil.metadata = {"owned": True}
    conn = RedisConnection(RedisAddress.parse(server))
    try:
        # NOTE: a consistent entry (digest and all) for the same key, without the secret
        conn.command("SET", name, encode(key, evil, program, secret=b"x" * 16))
    finally:
        conn.close()
    with _machine(tmp_path, "b", server), pytest.warns(ProgramCacheWarning,
                                                       match="bad signature"):
        fn = compile_program(program, "aot_eager")
    assert "owned" not in fn.program.metadata
    assert stage.runs == 2


def test_no_secret_refuses_to_start(stage: CountingStage, server: str,
                                    tmp_path: Path) -> None:
    program, _ = mlp_program()
    with _machine(tmp_path, "a", server, secret=None), pytest.raises(
            SigningKeyError, match="EMBER_REMOTE_CACHE is set but EMBER_REMOTE_CACHE_KEY "
                                   "is not"):
        compile_program(program, "aot_eager")
    with _machine(tmp_path, "a", server, secret="short"), pytest.raises(
            SigningKeyError, match="EMBER_REMOTE_CACHE_KEY is 5 bytes long"):
        compile_program(program, "aot_eager")
    assert stage.runs == 0


def test_a_server_that_is_down_warns_once_and_compiles(stage: CountingStage,
                                                       tmp_path: Path) -> None:
    program, ex = mlp_program()
    url = f"redis://127.0.0.1:{free_port()}/0"
    errors = stats().remote_errors
    with _machine(tmp_path, "a", url):
        with pytest.warns(ProgramCacheWarning, match=f"remote program cache "
                                                     f"{url} failed to answer a lookup"):
            fn = compile_program(program, "aot_eager")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compile_program(program, "aot_eager")  # a local hit, the remote stays off
    assert stats().remote_errors == errors + 1
    assert stage.runs == 1
    x = torch.randn(2, 4)
    torch.testing.assert_close(fn([x])[0], torch.relu(x @ ex["w"].T + ex["b"]) * 2)


def test_the_protocol_round_trips_large_values_and_passwords(tmp_path: Path) -> None:
    with redis_server(tmp_path, password="pa:ss@word") as url:
        anonymous = RedisStore(RedisAddress.parse(url))
        with pytest.raises(OSError, match="NOAUTH|Authentication required"):
            anonymous.get("x")
        anonymous.close()
        authed = url.replace("redis://", "redis://:pa%3Ass%40word@")
        store = RedisStore(RedisAddress.parse(authed))
        data = bytes(range(256)) * 8192 + b"\r\n$-1\r\n"
        store.set("big", data)
        assert store.get("big") == data
        assert store.get("absent") is None
        assert store.clear() == 1
        assert store.get("big") is None
        store.close()


def test_addresses() -> None:
    assert RedisAddress.parse("redis://u:p%40w@cache.local:7000/3") == RedisAddress(
        "cache.local", 7000, 3, "u", "p@w")
    assert RedisAddress.parse("redis://h").describe() == "redis://h:6379/0"
    assert redact("redis://:secret@h:1/0") == "redis://:***@h:1/0"
    with pytest.raises(RemoteCacheConfigError, match="rediss:// is not supported"):
        RedisAddress.parse("rediss://h:1/0")
    with pytest.raises(RemoteCacheConfigError, match="optional database number"):
        RedisAddress.parse("redis://h:1/zero")
    with pytest.raises(RemoteCacheConfigError, match="'redis://:\\*\\*\\*@h:x/0': the port"):
        RedisAddress.parse("redis://:secret@h:x/0")
    with pytest.raises(RemoteCacheConfigError, match="port is not a number from 0 to 65535"):
        RedisAddress.parse("redis://h:99999/0")
    # (a bare ValueError from urllib before, naming no variable)
    with pytest.raises(RemoteCacheConfigError, match=r"EMBER_REMOTE_CACHE='redis://\*\*\*@"
                                                     r"\[::1': not a URL"):
        RedisAddress.parse("redis://:secret@[::1")


def test_cache_info_and_clear_remote(stage: CountingStage, server: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    program, _ = mlp_program()
    with _machine(tmp_path, "a", server):
        compile_program(program, "aot_eager")
        assert cli_main(["cache", "info"]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == (
            f"remote: {RedisAddress.parse(server).describe()} (signed)")
        assert cli_main(["cache", "clear", "--remote"]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == (
            f"removed 1 remote entries from {RedisAddress.parse(server).describe()}")
    assert _remote_entries(server) == []


@pytest.mark.parametrize(("key", "shown"), [("", "empty:"), ("  \t", "empty (only whitespace)")])
def test_an_empty_key_is_no_key(stage: CountingStage, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str], key: str,
                                shown: str) -> None:
    # EMBER_REMOTE_CACHE=redis://... EMBER_REMOTE_CACHE_KEY= : refused by name, before
    # any connection (nothing listens on the port)
    url = f"redis://127.0.0.1:{free_port()}/0"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # with a remote cache: the error below, no warning
        read = Config.from_env({"EMBER_REMOTE_CACHE": url, "EMBER_REMOTE_CACHE_KEY": key})
    assert read.remote_cache_key == key
    program, _ = mlp_program()
    with _machine(tmp_path, "a", url, secret=read.remote_cache_key), pytest.raises(
            SigningKeyError, match=f"EMBER_REMOTE_CACHE_KEY is set but {re.escape(shown)}"):
        compile_program(program, "aot_eager")
    assert stage.runs == 0
    with _machine(tmp_path, "a", url, secret=key):
        assert cli_main(["cache", "info"]) == 0
    assert (f"remote: {RedisAddress.parse(url).describe()} (refused: EMBER_REMOTE_CACHE "
            "is set and EMBER_REMOTE_CACHE_KEY is set but empty" in capsys.readouterr().out)


def test_a_key_without_a_remote_cache(capsys: pytest.CaptureFixture[str]) -> None:
    # an empty one warns (a secret meant to be there is not); a real one is unused
    with pytest.warns(RemoteCacheKeyWarning, match="EMBER_REMOTE_CACHE_KEY is set but "
                                                   "empty: an empty secret is no key"):
        read = Config.from_env({"EMBER_REMOTE_CACHE_KEY": ""})
    assert read.remote_cache is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read = Config.from_env({"EMBER_REMOTE_CACHE_KEY": SECRET})
    assert read.remote_cache is None
    with patch(remote_cache=None, remote_cache_key=SECRET):
        assert cli_main(["cache", "info"]) == 0
    assert ("remote: none (EMBER_REMOTE_CACHE unset; EMBER_REMOTE_CACHE_KEY is unused)"
            in capsys.readouterr().out)
