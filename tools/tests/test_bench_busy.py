"""``bench.py --busy N``: which cores the busy processes take, their lifetime, the flag."""

from __future__ import annotations

import os

import bench
import pytest
from benchlib import busy


@pytest.mark.parametrize(("cores", "n", "expected"), [
    ({0, 1}, 0, []),
    ({0, 1}, 1, [1]),
    ({0, 1, 2, 3}, 2, [2, 3]),
    ({4, 9, 2}, 1, [9]),          # the last cores of the affinity set, not 0..n
])
def test_busy_cores_are_the_last_of_the_affinity_set(
    monkeypatch: pytest.MonkeyPatch, cores: set[int], n: int, expected: list[int]
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: cores)
    assert busy.busy_cores(n) == expected


@pytest.mark.parametrize("n", [-1, 2, 3])
def test_busy_needs_a_core_left_for_the_bench(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    with pytest.raises(ValueError, match=f"--busy {n}: needs 0 <= N < 2"):
        busy.busy_cores(n)
    with pytest.raises(SystemExit):
        bench.parse_args(["--busy", str(n)])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_busy_processes_spin_pinned_and_end_with_the_block() -> None:
    core = busy.busy_cores(1)
    with busy.busy_processes(1) as pids:
        (pid,) = pids
        assert os.sched_getaffinity(pid) == set(core)
        with open(f"/proc/{pid}/stat") as f:
            assert f.read().split(")")[1].split()[0] in ("R", "S", "D")  # alive (D: waiting on a page-in)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_busy_runs_time_means_that_count_the_slow_calls() -> None:
    import time

    import torch
    from benchlib import timing

    calls = iter([0.0, 0.0, 0.0, 0.0, 0.03] * 3)  # one slow call in five (after 2 warm-up)

    def fn() -> None:
        time.sleep(next(calls))

    cpu = torch.device("cpu")
    got = timing.interleaved_median_seconds({"f": fn}, cpu, min_time_s=0.0, min_reps=5,
                                            max_reps=5, warmup=0, mean=True)
    assert isinstance(got["f"], float) and got["f"] > 0.005  # the median would be ~0
