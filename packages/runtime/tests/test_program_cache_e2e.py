"""The program cache across fresh processes with the real stages (frontend, aot,
inductor): a second process runs no stage, on its own weights; a process on another
"machine" (another cache directory) gets the entry from a shared redis-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from redis_server import redis_server

pytest.importorskip("ember.frontend")
pytest.importorskip("ember.inductor")

SECRET = "0123456789abcdef-test-secret"

_SCRIPT = """
import json, sys, torch, ember.frontend
from ember.runtime.cache import stats
torch.manual_seed(int(sys.argv[1]))
device = sys.argv[2]
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
model = model.to(device)
x = torch.randn(8, 16, device=device)
out = ember.frontend.compile(model)(x)
error = (out - model(x)).abs().max().item()
out.square().sum().backward()  # the training program's backward graph, from the entry too
grad = model[0].weight.grad.clone()
model.zero_grad()
model(x).square().sum().backward()
error = max(error, (grad - model[0].weight.grad).abs().max().item())
s = stats()
print(json.dumps({"error": error, "local_hits": s.local_hits, "remote_hits": s.remote_hits,
                  "misses": s.misses, "stores": s.stores,
                  "cold_modules": sorted(m for m in ("ember.aot.pipeline", "ember.inductor.compile")
                                         if m in sys.modules)}))
"""


def _run(seed: int, cache_dir: Path, remote: str | None,
         device: str = "cpu") -> tuple[dict[str, Any], str]:
    env = dict(os.environ, EMBER_PROGRAM_CACHE="1", EMBER_CACHE="1",
               EMBER_CACHE_DIR=str(cache_dir), EMBER_LOGS="stages,cache")
    for name in ("EMBER_REMOTE_CACHE", "EMBER_REMOTE_CACHE_KEY", "EMBER_DEBUG_DIR",
                 "EMBER_SERIALIZE_BOUNDARIES"):
        env.pop(name, None)
    if remote is not None:
        env.update(EMBER_REMOTE_CACHE=remote, EMBER_REMOTE_CACHE_KEY=SECRET)
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(seed), device], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _stage_ran(log: str) -> bool:
    """Whether a stage's line is in ``log`` (a hit still prints its stage profile:
    capture, program cache, runtime load)."""
    return "aot: aten -> core-functional" in log or "inductor: core-functional ->" in log


def test_fresh_processes_share_the_cache(tmp_path: Path) -> None:
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    with redis_server(redis_dir) as url:
        first, log1 = _run(0, tmp_path / "a", url)
        assert (first["misses"], first["stores"]) == (1, 1)
        assert "aot: aten -> core-functional" in log1
        # the same machine, other weights: a local hit that runs on this process's weights
        second, log2 = _run(1, tmp_path / "a", None)
        assert (second["local_hits"], second["misses"]) == (1, 0), log1 + log2
        assert not _stage_ran(log2)
        assert second["error"] < 1e-5
        assert first["cold_modules"] == ["ember.aot.pipeline", "ember.inductor.compile"]
        assert second["cold_modules"] == []  # a hit imports no compiler internals
        # another machine (empty local cache), the same server: a remote hit
        third, log3 = _run(2, tmp_path / "b", url)
        assert (third["remote_hits"], third["misses"]) == (1, 0), log1 + log3
        assert not _stage_ran(log3)
        assert third["error"] < 1e-5


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_fresh_processes_share_the_cache_on_cuda(tmp_path: Path) -> None:
    first, log1 = _run(0, tmp_path / "a", None, "cuda")
    assert (first["misses"], first["stores"]) == (1, 1), log1
    second, log2 = _run(1, tmp_path / "a", None, "cuda")
    assert (second["local_hits"], second["misses"]) == (1, 0), log1 + log2
    assert not _stage_ran(log2)
    assert second["error"] < 1e-4
