"""``bench.py --busy N``: N busy-looping processes beside the bench (issue #17 item 6).

Each process spins in a Python loop, pinned to one of the bench's cores (the last N of
its affinity set), for as long as the context lasts: the bench's threads then share those
cores, as on a machine where another job keeps cores busy.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

SPIN = "while True: pass"


def busy_cores(n: int) -> list[int]:
    """The cores the ``n`` busy processes are pinned to: the last ``n`` of this
    process's affinity set.

    Raises:
        ValueError: ``n`` is negative or not below the number of usable cores (the bench
            needs one core of its own).
    """
    cores = sorted(os.sched_getaffinity(0))
    if n < 0 or n >= len(cores):
        raise ValueError(f"--busy {n}: needs 0 <= N < {len(cores)} (the cores this "
                         f"process may use: {cores})")
    return cores[len(cores) - n:] if n else []


@contextlib.contextmanager
def busy_processes(n: int) -> Iterator[list[int]]:
    """Run ``n`` spinning processes, each pinned to one core of :func:`busy_cores`, for
    the duration of the ``with`` block; yields their pids. They are killed on exit, also
    when the block raises."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for core in busy_cores(n):
            proc = subprocess.Popen([sys.executable, "-c", SPIN])
            procs.append(proc)
            os.sched_setaffinity(proc.pid, {core})
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
