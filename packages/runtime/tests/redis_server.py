"""A real ``redis-server`` on a free localhost port, in a temporary directory, for the
remote cache tests (Debian's ``redis-server`` package; ``.ci/run`` installs it)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

MISSING = "redis-server is not installed (apt-get install -y redis-server; .ci/run installs it)"


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def redis_server(directory: Path, password: str | None = None) -> Iterator[str]:
    """Run ``redis-server`` (no persistence; ``password``: ``requirepass``) until the
    block ends; yields its URL (without the password). Skips the test when the binary
    is missing."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip(MISSING)
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
         "--save", "", "--appendonly", "no", "--protected-mode", "yes",
         *(["--requirepass", password] if password is not None else [])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith((b"+PONG", b"-NOAUTH")):
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {port}")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(timeout=10)
