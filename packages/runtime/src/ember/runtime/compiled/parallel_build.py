"""Kernel builds of one program, run concurrently in a bounded thread pool.

A build is a call that spends its time outside the Python interpreter: ``g++`` in a
subprocess (C++ kernels, :mod:`.cpp_build`), Triton's native compiler passes and
``ptxas`` (Triton kernels, :mod:`.triton_aot`). Threads therefore overlap them, and a
thread pool keeps what the builds write (cache entries, Triton's in-memory kernels)
in this process.

The pool size is ``EMBER_COMPILE_THREADS`` (``config.compile_threads``); 0, the default,
means one thread per CPU the process may run on, at most :data:`MAX_DEFAULT_THREADS`;
1 builds one by one in the calling thread. Results come back in job order, whatever the
order in which builds finish, so a parallel build produces exactly what a serial one
does. A failed build does not stop the others: its result holds the exception (whose
message names the kernel), for the caller to raise or fall back on.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from ember.runtime.config import config
from ember.runtime.logs import log
from ember.runtime.phases import set_count

MAX_DEFAULT_THREADS = 32
"""The most threads the default (``EMBER_COMPILE_THREADS`` unset or 0) starts."""

_R = TypeVar("_R")


def compile_threads() -> int:
    """The build pool's size: ``config.compile_threads``, or (0) the CPUs this process
    may run on, capped at :data:`MAX_DEFAULT_THREADS`."""
    if config.compile_threads > 0:
        return config.compile_threads
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_DEFAULT_THREADS))


@dataclass(frozen=True)
class BuildJob(Generic[_R]):
    """One build: ``name`` says what is built (for logs and errors), ``build`` does it;
    ``cost``: a relative estimate of its time (a pool starts costly builds first, so the
    longest one does not start last)."""

    name: str
    build: Callable[[], _R]
    cost: int = 0


@dataclass(frozen=True)
class BuildResult(Generic[_R]):
    """What one :class:`BuildJob` gave: its ``value``, or the ``error`` it raised; and
    the wall time it took."""

    name: str
    value: _R | None
    error: Exception | None
    seconds: float

    def get(self) -> _R:
        """The value; re-raises the build's error.

        Raises:
            Exception: whatever the build raised.
        """
        if self.error is not None:
            raise self.error
        assert self.value is not None
        return self.value


def run_build(job: BuildJob[_R]) -> BuildResult[_R]:
    """Run one job in this thread: its result (an error it raises is caught into it)."""
    start = time.perf_counter()
    try:
        value = job.build()
    except Exception as e:  # noqa: BLE001 - handed to the caller in the result
        return BuildResult(job.name, None, e, time.perf_counter() - start)
    return BuildResult(job.name, value, None, time.perf_counter() - start)


def run_builds(jobs: Sequence[BuildJob[_R]], what: str,
               threads: int | None = None) -> list[BuildResult[_R]]:
    """Run ``jobs`` on at most ``threads`` threads (default :func:`compile_threads`);
    their results in job order. ``what`` names the kind of build in the log line
    (``EMBER_LOGS=stages``) that gives the pool size.
    """
    if not jobs:
        return []
    workers = max(1, min(threads or compile_threads(), len(jobs)))
    set_count("build threads", workers)
    log("stages", f"{what}: {len(jobs)} build{'s' if len(jobs) != 1 else ''} on "
                  f"{workers} thread{'s' if workers != 1 else ''} "
                  f"(EMBER_COMPILE_THREADS={config.compile_threads or 'auto'})")
    if workers == 1:
        return [run_build(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ember-build") as pool:
        return list(pool.map(run_build, jobs))
