"""User Triton kernel launches under trace capture.

Trace capture runs the user's Python on fake tensors, so ``kernel[grid](...)`` reaches
Triton's ``run`` with tensors that have no memory. While a trace runs,
:func:`launches_recorded` puts a handler in front of ``run``
(:func:`ember.frontend.bytecode.triton_launch.launches_handled`) that records the launch
instead: the same ``ember::triton_kernel`` node and ``aten::copy_`` nodes that strict
capture records, built by the same code (:func:`~ember.frontend.bytecode.triton_capture.
record_launch`), with this module's :class:`TraceSite` in place of the interpreter:

- the grid function and ``triton.heuristics`` rules run as plain Python (once per
  ``triton.autotune`` config); nothing they read is guarded, like every global read by
  a trace;
- the nodes carry the user's launch line (the innermost frame outside Triton, torch and
  Ember), not Triton's launcher;
- a tensor read from a closure or a global is a constant of the graph (or a lifted
  parameter when it requires grad), as for any op of a trace; the kernel may not write
  one;
- a launch that cannot be captured (``kernel.warmup``, a kernel no module attribute
  holds, an argument of another type, a kernel writing a closure's tensor)
  raises :class:`~ember.frontend.bytecode.triton_launch.TritonLaunchInCapture`, which
  trace capture reports as a ``CaptureError`` naming the launch line.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

from ember.frontend.bytecode.triton_capture import LaunchUnsupported, record_launch, run_parts
from ember.frontend.bytecode.triton_launch import (
    TritonLaunchInCapture,
    in_triton,
    kernel_name,
    launches_handled,
)
from ember.runtime.ir import SourceLocation
from ember.runtime.tracing import GraphRecorder
from ember.runtime.tracing_source import is_library_file, user_source_location

__all__ = ["TraceSite", "launches_recorded"]


class TraceSite:
    """A launch reached while ``recorder`` traces (a
    :class:`~ember.frontend.bytecode.triton_capture.LaunchSite`)."""

    outside_tensors = True  # a closure's tensor is a constant, as for any op of a trace

    def __init__(self, recorder: GraphRecorder, location: SourceLocation | None) -> None:
        self.recorder = recorder
        self.location = location

    def files(self) -> dict[str, bytes]:
        return self.recorder.files

    def call(self, fn: Any, meta: dict[str, Any]) -> Any:
        return fn(meta)

    def guard_kernel(self, kernel: Any) -> None:
        """Nothing: a trace reads globals once, unguarded (the kernel's source hash is
        still checked when the program runs)."""

    def record(self, fn: Callable[..., None], args: list[Any]) -> None:
        self.recorder.set_source(self.location)
        try:
            fn(*args)
        finally:
            self.recorder.set_source(None)


def launches_recorded(recorder: GraphRecorder) -> contextlib.AbstractContextManager[None]:
    """While the block runs, a user Triton launch on fake tensors on this thread is
    recorded into ``recorder`` (see the module docstring)."""

    def handle(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        site = TraceSite(recorder, _launch_location())
        try:
            grid, keywords = run_parts(kwargs)
            record_launch(site, kernel, grid, list(args), keywords)
        except LaunchUnsupported as e:
            raise TritonLaunchInCapture(
                f"launch of the user Triton kernel {kernel_name(kernel)} "
                f"({type(kernel).__name__}) is not captured by trace capture: {e}") from e

    return launches_handled(handle)


def _launch_location() -> SourceLocation | None:
    """The user's line that launched the kernel: the innermost frame outside Triton,
    torch, Ember and the standard library."""
    frame = sys._getframe(1)
    while frame is not None and (in_triton(frame)
                                 or is_library_file(frame.f_code.co_filename)):
        frame = frame.f_back  # type: ignore[assignment]
    return user_source_location(frame) if frame is not None else None
