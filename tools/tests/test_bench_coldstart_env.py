"""The cold/warm compile workers' environment (tools/benchlib/coldstart.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from benchlib import coldstart


def test_workers_write_bytecode_and_use_their_own_caches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the warm worker imports Ember from .pyc files, as an installed package does
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = coldstart.worker_env(tmp_path)
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["EMBER_CACHE_DIR"] == str(tmp_path / "ember")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton")
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(coldstart.TOOLS_DIR)
