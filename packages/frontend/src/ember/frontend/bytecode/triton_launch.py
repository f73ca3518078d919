"""User Triton kernel launches: captured as graph ops, never dropped.

A ``@triton.jit`` kernel launched inside a compiled function (``kernel[grid](...)``,
``kernel.run(..., grid=..., warmup=False)``, also through ``triton.autotune`` and
``triton.heuristics``) writes its outputs through raw data pointers, which fake tensors
do not have: it must never run during capture.

- strict capture: :func:`capture_or_break` (called by ``CallHandler.call_symbolic``)
  records the launch as one ``ember::triton_kernel`` node
  (:mod:`.triton_capture`: kernel, tensors, scalars, constexprs, the grid per autotune
  config, the tensors it writes found by :mod:`.triton_writes`) and copies its written
  results back with ``aten::copy_``. A launch it cannot capture (``kernel.warmup``, a
  kernel no module attribute holds, an argument of another type) is a graph break
  naming the reason; the launch then runs eagerly on real tensors, logged under
  ``EMBER_LOGS=graph_breaks`` and listed by ``ember.frontend.explain``.
- trace capture: :func:`launches_handled` makes a launch on fake tensors call the
  handler trace capture installs (``ember.frontend.trace_triton``), which records the
  same node through the same code (:func:`.triton_capture.record_launch`). A launch it
  cannot capture raises :class:`TritonLaunchInCapture`, reported as a ``CaptureError``
  naming the kernel and the user's launch line (:func:`frames_before_triton`).
- code that strict capture runs on fake tensors (``nonstrict`` regions):
  :func:`launches_refused` makes a launch raise :class:`TritonLaunchInCapture` before
  Triton looks at its arguments; strict capture reports it as a graph break.

Triton is never imported here: when ``triton`` is not loaded, no kernel can exist.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

from ember.frontend._torch import fake_mode_active

__all__ = ["LAUNCH_HINT", "LaunchHandler", "TritonLaunchInCapture", "capture_or_break",
           "frames_before_triton", "in_triton", "kernel_name", "launched_kernel",
           "launches_handled", "launches_refused"]

LAUNCH_HINT = ("this launch is not captured: it runs eagerly between two graphs (launch "
               "a module-level kernel with kernel[grid](...) to capture it)")


class TritonLaunchInCapture(RuntimeError):
    """A user Triton kernel was launched on fake tensors where it cannot be captured."""


LaunchHandler = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]
"""What a launch on fake tensors calls: ``handler(kernel, args, kwargs)`` with the
arguments of ``kernel.run`` (``grid=`` and ``warmup=`` among the keywords)."""


def _kernel_types() -> tuple[type, ...]:
    """Triton's kernel base class (``@jit``, ``autotune``, ``heuristics`` and the
    interpreter's kernels derive from it), if Triton is loaded."""
    jit = sys.modules.get("triton.runtime.jit")
    interface = getattr(jit, "KernelInterface", None)
    return (interface,) if isinstance(interface, type) else ()


def launched_kernel(fn: Any) -> Any | None:
    """The Triton kernel that calling ``fn`` launches, else None: ``fn`` is a kernel,
    one of its bound methods (``kernel.run``, ``kernel.warmup``), the launcher that
    ``kernel[grid]`` returns (a Triton function closing over the kernel) or a
    ``functools.partial`` of one of those."""
    kinds = _kernel_types()
    if not kinds:
        return None
    while isinstance(fn, functools.partial):
        fn = fn.func
    if isinstance(fn, kinds):
        return fn
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, kinds):
        return owner
    if isinstance(fn, types.FunctionType) and fn.__closure__ and (
            fn.__module__ or "").split(".")[0] == "triton":
        for cell in fn.__closure__:
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(value, kinds):
                return value
    return None


def kernel_name(kernel: Any) -> str:
    """The user's function under a kernel and its wrappers (autotune -> heuristics ->
    jit -> the Python function)."""
    inner = kernel
    for _ in range(8):
        nested = getattr(inner, "fn", None)
        if nested is None:
            break
        inner = nested
    return str(getattr(inner, "__qualname__", None) or type(kernel).__qualname__)


def capture_or_break(handler: Any, interp: Any, frame: Any, fn: Any, kernel: Any,
                     args: list[Any], kwargs: dict[str, Any]) -> None:
    """Capture calling ``fn`` (which launches ``kernel``) as a graph op
    (:func:`.triton_capture.capture_launch`), or break the graph naming why not."""
    from ember.frontend.bytecode.triton_capture import LaunchUnsupported, capture_launch

    try:
        capture_launch(handler, interp, frame, fn, kernel, args, kwargs)
    except LaunchUnsupported as e:
        raise interp.fail(f"launch of the user Triton kernel {kernel_name(kernel)} "
                          f"({type(kernel).__name__}): {e}", LAUNCH_HINT) from e


# ---- refusing launches on fake tensors ------------------------------------------------

_lock = threading.Lock()
_users = 0
_patched: list[tuple[type, Callable[..., Any]]] = []


class _Handlers(threading.local):
    """This thread's launch handlers, innermost last (:func:`launches_handled`)."""

    def __init__(self) -> None:
        self.stack: list[LaunchHandler | None] = []


_handlers = _Handlers()


def _intercepting(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if fake_mode_active():
            handler = _handlers.stack[-1] if _handlers.stack else None
            if handler is not None:
                return handler(self, args, kwargs)
            raise TritonLaunchInCapture(
                f"the user Triton kernel {kernel_name(self)} was launched on fake "
                "tensors during capture, in code run on fake tensors (a nonstrict "
                "region); launch it from the compiled function's code, where the "
                "launch becomes a graph op")
        return original(self, *args, **kwargs)

    run.__ember_intercepting__ = True  # type: ignore[attr-defined]
    return run


def _launching_classes(base: type) -> Iterator[type]:
    """``base`` and its loaded subclasses that define ``run`` themselves."""
    seen: set[type] = set()
    todo = [base]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        todo.extend(cls.__subclasses__())
        if "run" in vars(cls):
            yield cls


def launches_refused() -> contextlib.AbstractContextManager[None]:
    """While the block runs, a Triton launch made on this thread under a fake tensor mode
    raises :class:`TritonLaunchInCapture` before Triton reads its arguments; launches on
    real tensors (other threads, eager code) are unaffected. A no-op without Triton
    loaded. Nested and concurrent uses share one installation."""
    return launches_handled(None)


@contextlib.contextmanager
def launches_handled(handler: LaunchHandler | None) -> Iterator[None]:
    """While the block runs, a Triton launch made on this thread under a fake tensor
    mode calls ``handler`` (:data:`LaunchHandler`) instead of Triton, at the outermost
    wrapper launched (an ``Autotuner``, not its jit function); None refuses it
    (:func:`launches_refused`). Launches on real tensors are unaffected. Without Triton
    loaded, nothing is installed."""
    global _users
    kinds = _kernel_types()
    if not kinds:
        yield
        return
    _handlers.stack.append(handler)
    with _lock:
        if _users == 0:
            for cls in _launching_classes(kinds[0]):
                original = vars(cls)["run"]
                if not getattr(original, "__ember_intercepting__", False):
                    _patched.append((cls, original))
                    setattr(cls, "run", _intercepting(original))  # noqa: B010 - cls is a type
        _users += 1
    try:
        yield
    finally:
        _handlers.stack.pop()
        with _lock:
            _users -= 1
            if _users == 0:
                while _patched:
                    cls, original = _patched.pop()
                    setattr(cls, "run", original)  # noqa: B010


def in_triton(frame: types.FrameType) -> bool:
    """Whether ``frame`` runs Triton's own code (its launcher, autotuner, helpers)."""
    return str(frame.f_globals.get("__name__", "")).split(".")[0] == "triton"


def frames_before_triton(tb: types.TracebackType | None) -> types.TracebackType | None:
    """A copy of traceback ``tb`` up to its first frame in Triton's code, so that the
    innermost user frame it names is the user's launch, not Triton's launcher."""
    kept: list[types.TracebackType] = []
    while tb is not None:
        if in_triton(tb.tb_frame):
            break
        kept.append(tb)
        tb = tb.tb_next
    copy: types.TracebackType | None = None
    for t in reversed(kept):
        copy = types.TracebackType(copy, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return copy
