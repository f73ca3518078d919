"""A remote cache server that misbehaves: replies that are not RESP or break its bounds,
a server that drips its reply a byte at a time, and one that stops in the middle of a
run. Each is a ``RedisError`` (an
``OSError``) for the store, and for a compile one ``ProgramCacheWarning`` and a miss,
never a crash or an unbounded read."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from counting_stage import CountingStage, install_counting_stage
from ember.runtime.cache import ProgramCacheWarning, stats
from ember.runtime.cache import redis_backend
from ember.runtime.cache.program_cache import close_remotes
from ember.runtime.cache.redis_backend import (
    MAX_LINE,
    RedisAddress,
    RedisConnection,
    RedisError,
    RedisStore,
)
from ember.runtime.config import patch
from ember.runtime.pipeline import compile_program
from handbuilt import mlp_program
from redis_server import redis_server

SECRET = "0123456789abcdef-test-secret"


@pytest.fixture(autouse=True)
def _close_remotes() -> Iterator[None]:
    yield
    close_remotes()


def _long_line(conn: socket.socket) -> None:
    conn.sendall(b"+" + b"a" * (MAX_LINE + 10))


def _serve(reply: bytes | Callable[[socket.socket], None]) -> Iterator[int]:
    """A server on a free port answering every command with ``reply``; yields the port."""
    listener = socket.create_server(("127.0.0.1", 0))
    port: int = listener.getsockname()[1]
    done = threading.Event()

    def run() -> None:
        try:
            while not done.is_set():
                conn, _ = listener.accept()
                with conn:
                    while conn.recv(1 << 16):
                        if callable(reply):
                            reply(conn)
                        else:
                            conn.sendall(reply)
        except OSError:
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        done.set()
        listener.close()


@pytest.mark.parametrize(("reply", "message"), [
    (b":abc\r\n", "expected a number"),
    (b"$x\r\n", "expected a number"),
    (b"$99999999999\r\n", "a string of 99999999999 bytes"),
    (b"$-5\r\n", "a string of -5 bytes"),
    (b"*999999999999\r\n", "an array of 999999999999 items"),
    (b"*1\r\n" * 10000, "4 deep"),
    (_long_line, f"longer than {MAX_LINE} bytes"),
    (b"?hello\r\n", "not a RESP reply"),
])
def test_a_reply_that_is_not_resp_is_a_redis_error(
        reply: bytes | Callable[[socket.socket], None], message: str) -> None:
    for port in _serve(reply):
        store = RedisStore(RedisAddress("127.0.0.1", port))
        try:
            with pytest.raises(RedisError, match=message):
                store.get("k")
        finally:
            store.close()


def test_a_server_answering_garbage_is_a_miss_with_a_warning(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stage: CountingStage = install_counting_stage(monkeypatch)
    program, ex = mlp_program()
    errors = stats().remote_errors
    for port in _serve(b"*1\r\n" * 10000):
        with patch(program_cache=True, cache_enabled=True, cache_dir=tmp_path / "a",
                   remote_cache=f"redis://127.0.0.1:{port}/0", remote_cache_key=SECRET):
            with pytest.warns(ProgramCacheWarning, match="RedisError.*4 deep"):
                fn = compile_program(program, "aot_eager")
    assert stage.runs == 1
    assert stats().remote_errors == errors + 1
    x = torch.randn(2, 4)
    torch.testing.assert_close(fn([x])[0], torch.relu(x @ ex["w"].T + ex["b"]) * 2)


def test_a_server_that_stops_mid_run_is_a_miss_with_a_warning(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stage: CountingStage = install_counting_stage(monkeypatch)
    program, ex = mlp_program()
    other = dataclasses.replace(program, metadata={**program.metadata, "variant": 2})
    directory = tmp_path / "redis"
    directory.mkdir()
    errors = stats().remote_errors
    with patch(program_cache=True, cache_enabled=True, cache_dir=tmp_path / "a",
               remote_cache_key=SECRET):
        with redis_server(directory) as url, patch(remote_cache=url):
            compile_program(program, "aot_eager")  # connected, stored remotely
        assert stats().remote_errors == errors
        # NOTE: the server has stopped; the process's open connection to it stays
        with patch(remote_cache=url), pytest.warns(ProgramCacheWarning,
                                                    match="failed to answer a lookup"):
            fn = compile_program(other, "aot_eager")
    assert stage.runs == 2
    assert stats().remote_errors == errors + 1
    x = torch.randn(2, 4)
    torch.testing.assert_close(fn([x])[0], torch.relu(x @ ex["w"].T + ex["b"]) * 2)


def _drip(reply: bytes, interval: float) -> Callable[[socket.socket], None]:
    """A server answer: ``reply`` one byte every ``interval`` seconds."""
    def send(conn: socket.socket) -> None:
        for i in range(len(reply)):
            conn.sendall(reply[i:i + 1])
            time.sleep(interval)
    return send


def test_a_reply_dripped_a_byte_at_a_time_is_a_redis_error_at_the_deadline() -> None:
    # each byte comes well within the timeout; the whole reply would take 10 s
    for port in _serve(_drip(b"$200\r\n" + b"x" * 200 + b"\r\n", 0.05)):
        conn = RedisConnection(RedisAddress("127.0.0.1", port), timeout=0.5)
        start = time.monotonic()
        try:
            with pytest.raises(RedisError, match=r"did not answer within 0\.5 s"):
                conn.command("GET", "k")
        finally:
            conn.close()
        assert time.monotonic() - start < 1.5


def test_a_reply_in_many_pieces_within_the_deadline_is_read() -> None:
    for port in _serve(_drip(b"*2\r\n$3\r\nabc\r\n:7\r\n", 0.01)):
        conn = RedisConnection(RedisAddress("127.0.0.1", port), timeout=2.0)
        try:
            assert conn.command("GET", "k") == [b"abc", 7]
        finally:
            conn.close()


def test_a_dripping_server_is_a_miss_with_a_warning(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(redis_backend, "TIMEOUT_S", 0.3)
    stage: CountingStage = install_counting_stage(monkeypatch)
    program, ex = mlp_program()
    errors = stats().remote_errors
    for port in _serve(_drip(b"+" + b"O" * 200 + b"\r\n", 0.05)):
        start = time.monotonic()
        with patch(program_cache=True, cache_enabled=True, cache_dir=tmp_path / "a",
                   remote_cache=f"redis://127.0.0.1:{port}/0", remote_cache_key=SECRET):
            with pytest.warns(ProgramCacheWarning,
                              match=r"failed to answer a lookup \(RedisError: .*within 0\.3 s"):
                fn = compile_program(program, "aot_eager")
        assert time.monotonic() - start < 3
    assert stage.runs == 1
    assert stats().remote_errors == errors + 1
    x = torch.randn(2, 4)
    torch.testing.assert_close(fn([x])[0], torch.relu(x @ ex["w"].T + ex["b"]) * 2)
