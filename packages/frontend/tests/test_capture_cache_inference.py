"""A capture answered by the capture cache keeps what the segment adds to its graph's
results: the results made in a ``with torch.inference_mode()`` block are inference
tensors, and a failed ``assert`` over data-dependent sizes names its message.

Two fresh processes over one cache directory: the first stores, the second hits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

USER_MODULE = '''
import torch


def infer(x):
    with torch.inference_mode():
        y = x * 2
    return y, x + 1


def at_most_one(x):
    n = (x > 0).sum().item()
    assert n < 2, "too many positives"
    return x.new_zeros(n)
'''

RUNNER = '''
import json
import torch
import usermod
import ember.frontend as ef

infer = ef.compile(usermod.infer, backend="aot_eager")
y, z = infer(torch.randn(3))
bounded = ef.compile(usermod.at_most_one, backend="aot_eager", dynamic=True)
bounded(torch.tensor([1.0, -1.0]))
try:
    bounded(torch.tensor([1.0, 1.0]))
    error = None
except ValueError as e:
    error = str(e)
print(json.dumps({"hits": [infer.stats.capture_cache_hits, bounded.stats.capture_cache_hits],
                  "inference": [y.is_inference(), z.is_inference()], "error": error}))
'''


def _run(tmp: Path) -> dict[str, object]:
    env = dict(os.environ)
    env.update({"EMBER_CACHE_DIR": str(tmp / "cache"), "EMBER_PROGRAM_CACHE": "1",
                "EMBER_CAPTURE_CACHE": "1", "EMBER_LOGS": "cache",
                "PYTHONPATH": os.pathsep.join([str(tmp), env.get("PYTHONPATH", "")])})
    proc = subprocess.run([sys.executable, str(tmp / "runner.py")], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["log"] = proc.stderr
    return result


def test_a_cached_capture_keeps_inference_results_and_assert_messages(tmp_path: Path) -> None:
    (tmp_path / "usermod.py").write_text(textwrap.dedent(USER_MODULE))
    (tmp_path / "runner.py").write_text(textwrap.dedent(RUNNER))
    for hits in ([0, 0], [1, 1]):
        result = _run(tmp_path)
        assert result["hits"] == hits, result["log"]
        assert result["inference"] == [True, False]
        assert "assertion failed: too many positives (at " in str(result["error"])
        assert 'assert n < 2, "too many positives")' in str(result["error"])
