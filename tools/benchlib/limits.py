"""A wall-clock limit on a phase of the benchmark, so one hanging compile cannot stall a
whole run (a hang in Python code: the frontend's bytecode interpreter, a pass that does
not converge). POSIX main thread only; elsewhere the limit is not enforced."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class PhaseTimeout(TimeoutError):
    """A benchmark phase ran past its time limit."""


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str) -> Iterator[None]:
    """Raise :class:`PhaseTimeout` in the body after ``seconds`` (``None``: no limit)."""
    usable = hasattr(signal, "setitimer") and (
        threading.current_thread() is threading.main_thread()
    )
    if seconds is None or seconds <= 0 or not usable:
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise PhaseTimeout(f"{what} took longer than {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
