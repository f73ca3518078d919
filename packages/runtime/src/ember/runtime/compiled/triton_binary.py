"""Launching one compiled Triton binary with as little Python as this Triton allows.

Triton's ``CompiledKernel[grid](*args)`` builds a runner closure per launch, asks for the
launch metadata, the current device and stream and the launch hooks, and calls the
binary's launcher object (``compiled.run``), whose ``__call__`` allocates the scratch
memory the binary asks for and calls the C launch function (``launcher.launch``). Each
of those is Python on every launch: most of a small kernel's host cost, paid hundreds of
times per training step. :func:`binary_launch` removes what this Triton lets it remove,
each step checked against the Triton at hand, never assumed from a version number:

1. **The runner** (:func:`runner_is_direct`): where ``CompiledKernel.__getitem__`` is the
   thin wrapper over ``run(gx, gy, gz, stream, function, packed_metadata,
   launch_metadata, enter_hook, exit_hook, *args)`` (read from its source once per
   class), the launch calls ``run`` with those arguments, bound once.
2. **The launcher object** (:func:`flat_launch`): where the launcher's ``__call__`` only
   forwards to its C ``launch`` with constant arguments added after ``function`` (the
   binary's cooperative-grid and PDL flags, no scratch memory: Triton 3.6), the launch
   calls ``launch`` directly. Whether it does is *observed*, not read: a copy of the
   launcher whose ``launch`` records its arguments is called twice with marker
   arguments; the forwarding is taken only when both calls record exactly the markers,
   in place, after the same constant values. A binary that asks for scratch memory, or a
   launcher that records anything else, keeps step 1.

While a launch hook is installed (a profiler) every launch goes through Triton's own
runner, which computes the metadata the hook reads.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

from ember.runtime.compiled._torch import raw_current_device
from ember.runtime.compiled.triton_scratch import needs_global_scratch, with_scratch_allocator
from ember.runtime.compiled.triton_static import StaticLaunch
from ember.runtime.logs import log

BinaryLaunch = Callable[[tuple[int, ...], tuple[Any, ...]], None]
"""``launch(grid, args)``: one compiled binary run over a three-dimensional grid."""

# The call Triton's own ``CompiledKernel[grid](*args)`` makes, which binary_launch makes
# directly when this Triton's runner is written this way.
_RUNNER_CALL = ("self.run(grid[0], grid[1], grid[2], stream, self.function, "
                "self.packed_metadata, launch_metadata,")


_direct_runners: dict[type, bool] = {}


def runner_is_direct(kernel_type: type) -> bool:
    """Whether ``kernel_type[grid](*args)`` (this Triton's ``CompiledKernel``) is a thin
    runner over ``kernel.run(gx, gy, gz, stream, function, packed_metadata,
    launch_metadata, enter_hook, exit_hook, *args)``: read from its source once, so a
    Triton whose runner differs keeps the runner."""
    known = _direct_runners.get(kernel_type)
    if known is None:
        try:
            source = inspect.getsource(getattr(kernel_type, "__getitem__"))
            known = _RUNNER_CALL in " ".join(source.split())
        except (AttributeError, OSError, TypeError):
            known = False
        _direct_runners[kernel_type] = known
    return known


class _Marker:
    """An argument the probe of :func:`flat_launch` recognises by identity."""


_PROBES = (((3, 5, 7), 11), ((13, 1, 2), 17))  # (grid, stream) of the two probe calls


def flat_launch(launcher: Any) -> tuple[Callable[..., None], tuple[Any, ...]] | None:
    """``(launch, constants)`` when calling ``launcher(gx, gy, gz, stream, function,
    *rest)`` is the same as ``launch(gx, gy, gz, stream, function, *constants, *rest)``
    for this launcher (module doc, step 2); None otherwise.

    Never probes a launcher whose binary asks for scratch memory (its ``__call__``
    would allocate it, sized by the grid), nor one with a sanitizer enabled."""
    launch = getattr(launcher, "launch", None)
    if not callable(launch) or getattr(launcher, "gsan_enabled", False):
        return None
    attributes = getattr(launcher, "__dict__", {})
    if any(name.endswith("scratch_size") and value for name, value in attributes.items()):
        return None
    constants: tuple[Any, ...] | None = None
    for grid, stream in _PROBES:
        recorded: list[tuple[Any, ...]] = []
        function, first, second = _Marker(), _Marker(), _Marker()
        try:
            probe = copy.copy(launcher)
            probe.launch = lambda *a: recorded.append(a)
            probe(*grid, stream, function, first, second)
        except Exception:  # noqa: BLE001 - a launcher that does more: not flat
            return None
        if len(recorded) != 1:
            return None
        call = recorded[0]
        head, middle, tail = call[:5], call[5:-2], call[-2:]
        if (len(call) < 7 or head[:4] != (*grid, stream) or head[4] is not function
                or tail[0] is not first or tail[1] is not second
                or not all(v is None or type(v) in (bool, int) for v in middle)
                or (constants is not None and middle != constants)):
            return None
        constants = middle
    return None if constants is None else (launch, constants)


def binary_launch(compiled: Any, trailing: tuple[Any, ...],
                  static: StaticLaunch | None = None) -> BinaryLaunch:
    """The launcher of one compiled binary, called as ``launch(grid, args)`` (module
    doc). ``trailing``: the values of the kernel's parameters after the runtime ones,
    which the binary takes after them. A binary that needs global scratch memory
    (:func:`.triton_scratch.needs_global_scratch`: TMA descriptors) first makes sure
    the calling thread has Triton's allocator (:mod:`.triton_scratch`). ``static``: the
    binary's launch through torch's C++ launcher and its loaded function
    (:func:`.triton_static.static_launch`), which the launch then calls with the runtime
    arguments alone (Triton's launcher is not made, nor its module loaded)."""
    launch = _binary_launch(compiled, trailing, static)
    return with_scratch_allocator(launch) if needs_global_scratch(compiled) else launch


def _binary_launch(compiled: Any, trailing: tuple[Any, ...],
                   static: StaticLaunch | None) -> BinaryLaunch:
    """:func:`binary_launch` without the scratch allocator's check (``static``: torch's
    launch of the binary and its function handle, :func:`.triton_static.static_launch`)."""
    def through_runner(grid: tuple[int, ...], args: tuple[Any, ...]) -> None:
        compiled[grid](*args, *trailing)

    try:
        import triton
        from triton.runtime import driver

        runtime_knobs = triton.knobs.runtime
        if static is None:  # Triton's launcher
            if not runner_is_direct(type(compiled)):
                return through_runner
            run, function = compiled.run, compiled.function  # run: loads the binary
            packed = compiled.packed_metadata
        active = driver.active
        current_stream = active.get_current_stream
        # the device as one C call, not torch.cuda.current_device's three Python frames
        current_device = raw_current_device() or active.get_current_device
    except Exception as e:  # noqa: BLE001 - any difference: Triton's own runner
        log("cache", f"Triton binary launched through Triton's runner ({type(e).__name__}: {e})")
        return through_runner

    if static is not None:  # torch's launcher: the runtime arguments alone
        (launch, function), before, after = static, (), ()
    else:
        # the C launch with its constant flags (step 2), else the launcher object itself
        launch, constants = flat_launch(run) or (run, ())
        before, after = (*constants, packed, None, None, None), trailing

    def direct(grid: tuple[int, ...], args: tuple[Any, ...]) -> None:
        if not (_no_hook(runtime_knobs.launch_enter_hook)
                and _no_hook(runtime_knobs.launch_exit_hook)):
            compiled[grid](*args, *trailing)
            return
        launch(grid[0], grid[1], grid[2], current_stream(current_device()), function,
               *before, *args, *after)

    # what .triton_fast_launch calls inline: (launch, function, before, after, stream, device)
    parts = (launch, function, before, after, current_stream, current_device)
    direct.parts = parts  # type: ignore[attr-defined]
    return direct


DirectParts = tuple[Callable[..., None], Any, tuple[Any, ...], tuple[Any, ...],
                    Callable[[int], int], Callable[[], int]]
"""A direct launch's pieces: ``launch(gx, gy, gz, stream(device()), function, *before,
*args, *after)`` runs the binary while no launch hook is installed."""


def direct_parts(run: BinaryLaunch) -> DirectParts | None:
    """The pieces of ``run`` when it is a direct launch (module doc, steps 1 and 2) that
    needs no scratch allocator; None otherwise (Triton's runner, or scratch memory)."""
    parts: DirectParts | None = getattr(run, "parts", None)
    return parts


def _no_hook(hook: Any) -> bool:
    """Whether a Triton launch hook slot is empty: None, or (newer Tritons) a hook chain
    with no hooks in it."""
    return hook is None or (type(hook).__name__ == "HookChain" and not hook.calls)


__all__ = ["BinaryLaunch", "binary_launch", "flat_launch", "runner_is_direct"]
