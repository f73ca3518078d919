"""A Triton kernel's launch in one Python frame: what a compiled wrapper calls.

A wrapper calls its Triton kernels hundreds of times a training step (HF Llama's: about
200 launches), and on the GPU machine's host Ember's own Python was most of the gap to
torch.compile's launches: ``TritonLaunch.__call__`` reads the device, finds the device's
kernels, ``TritonKernel.launch3`` computes the argument specialization and finds the
binary, and the binary's ``direct`` launch checks Triton's hooks, five frames before
Triton's C launch (``tools/gpu/host_profile.py``: 20.5 us a launch under cProfile
against torch.compile's 13.9).

:func:`fast_launch` writes, for one kernel, a function that does all of it inline:

    def kernel(*a):
        if len(a) == <arity>:
            try:
                run = by_index[a[<first pointer>].get_device()][<specialization of a>]
            except (KeyError, AttributeError, TypeError):
                run = None
            if run is not None and <no launch hook installed>:
                <grid>
                c, f, before, after, stream, device = run
                c(gx, gy, gz, stream(device()), f, *before, *a, *after)
                return
        slow(*a)

``by_index`` maps a CUDA device's index to its kernel's bound direct launches
(:attr:`.triton_kernel.TritonKernel.fast`, by the same specialization keys as the
kernel's own table, filled as binaries are bound). Everything else takes ``slow``, the
:class:`~.triton_launcher.TritonLaunch` itself: the first launch of a specialization
(which binds its binary), the interpreter, split reductions, a launch hook (a profiler),
a binary needing scratch memory, wrong arguments (which ``slow`` names). The launch
itself sits outside the ``try``: an exception from the C launch is never retried.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ember.runtime.compiled.triton_kernel import specialization_expression
from ember.runtime.config import config

__all__ = ["POINTERS_AS_INTS", "fast_launch"]

#: Pass each pointer argument to Triton's C launch as its address (``t.data_ptr()``, an
#: int) instead of the tensor. Given a tensor, Triton's launcher calls its ``data_ptr``
#: method and then asks the driver for the pointer's device address
#: (``cuPointerGetAttribute``), once per pointer per launch; given an int it uses it as
#: it is. The wrapper only passes CUDA tensors of the kernel's device (the fast path is
#: keyed by the first pointer's device; any other argument takes ``slow``). An
#: experiment until measured on the GPU machine (``tools/gpu/launch_overhead.py``). Not
#: with torch's launcher (``config.torch_launcher``: :mod:`.triton_static`), whose C
#: launcher takes the tensors.
POINTERS_AS_INTS = False


class _NoHookChain:
    """Stands for Triton's ``HookChain`` where this Triton has none."""

    calls: tuple[()] = ()


def fast_launch(name: str, signature: dict[str, str], static_grid: tuple[int, ...] | None,
                grid_at: Callable[[Sequence[Any]], tuple[int, ...]],
                by_index: dict[int, dict[tuple[Any, ...], Any]],
                slow: Callable[..., None]) -> Callable[..., None]:
    """The one-frame launch of a kernel (module doc), or ``slow`` itself where there is
    no fast path: no pointer parameter, an empty static grid, or no Triton.

    Args:
        name: the kernel's name (the function's ``__name__``, for tracebacks).
        signature: the kernel's runtime parameters and their Triton types, in order.
        static_grid: the three-dimensional grid when it is static, else None.
        grid_at: the grid at a launch's arguments (a symbolic grid).
        by_index: CUDA device index -> the kernel's direct launches by specialization.
        slow: the full launch, for everything the fast path does not take.
    """
    pointers = [i for i, ty in enumerate(signature.values()) if ty.startswith("*")]
    if not pointers or (static_grid is not None and 0 in static_grid):
        return slow
    try:
        import triton

        knobs = triton.knobs.runtime
        hook = knobs.launch_enter_hook
    except Exception:  # noqa: BLE001 - no Triton (or another one): the full launch
        return slow
    chain = type(hook) if type(hook).__name__ == "HookChain" else _NoHookChain
    if static_grid is not None:
        gx, gy, gz = static_grid
        grid = f"gx, gy, gz = {gx}, {gy}, {gz}"
    else:
        grid = "gx, gy, gz = grid_at(a)\n                    if not (gx and gy and gz):\n" \
               "                        return  # an empty tensor: nothing to compute"
    # each argument written out only where pointers become addresses; else one unpacking
    arguments = "*a"
    if POINTERS_AS_INTS and not config.torch_launcher:
        arguments = ", ".join(f"a[{i}].data_ptr()" if i in pointers else f"a[{i}]"
                              for i in range(len(signature)))
    source = f"""
def make(by_index, grid_at, knobs, chain, slow):
    def launch(*a):
        if len(a) == {len(signature)}:
            try:
                run = by_index[a[{pointers[0]}].get_device()][{specialization_expression(signature, 'a')}]
            except (KeyError, AttributeError, TypeError):
                run = None
            if run is not None:
                e, x = knobs.launch_enter_hook, knobs.launch_exit_hook
                if ((e is None or (e.__class__ is chain and not e.calls))
                        and (x is None or (x.__class__ is chain and not x.calls))):
                    {grid}
                    c, f, before, after, stream, device = run
                    c(gx, gy, gz, stream(device()), f, *before, {arguments}, *after)
                    return
        slow(*a)
    return launch
"""
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<ember launch {name}>", "exec"), namespace)  # noqa: S102
    launch: Callable[..., None] = namespace["make"](by_index, grid_at, knobs, chain, slow)
    launch.__name__ = launch.__qualname__ = name
    return launch
