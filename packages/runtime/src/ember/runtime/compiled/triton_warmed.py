"""The Triton binaries built before their first launch, kept for that launch.

The inductor's ``precompile_triton`` builds each Triton kernel of a program in a thread
pool (:func:`.triton_aot.warm_kernel`) so that the first call launches instead of
compiling. Leaving the binary in Triton's own JIT cache is not enough: that cache lives
on the ``JITFunction`` object, one per imported kernel file, and the launcher imports
the file from Ember's kernel-source cache (:mod:`.triton_cache`) at load time. A launcher
loaded under another cache root (a test that compiles under ``patch(cache_dir=...)`` and
loads outside it, ``EMBER_CACHE=0``'s per-process folder, a program loaded again) gets
another ``JITFunction``, whose cache is empty: Triton's JIT then calls
``knobs.runtime.jit_cache_hook`` and recompiles (on Triton 3.6 the hook fires on every
miss of the in-memory cache, before Triton looks at its on-disk cache). Matching
Triton's key rules (specialization, options, device, the object) from outside is
fragile across Triton versions.

So the warm-up records the compiled kernel it got here, in a process-level table keyed
by what the binary depends on (:func:`warm_key`: the source's digest, the entry
function, the constexprs, warps, stages and the device index) together with the
argument specialization it was built for (each tensor's dtype and 16-byte alignment,
the launch key of :func:`.triton_kernel.specialization_key`). The first launch of a
:class:`.triton_kernel.TritonKernel` whose key equals it takes the binary from here
(:func:`take`) and launches it directly; any other specialization (a misaligned view)
goes through Triton's JIT as before.

The table is shared by the build threads and the launching threads (a lock guards it)
and holds at most :data:`MAX_ENTRIES` binaries, oldest dropped first (a process that
compiles program after program does not keep every binary alive).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ember.runtime.compiled.triton_kernel import TritonKernelSpec

#: the most warmed binaries the process keeps (oldest dropped first)
MAX_ENTRIES = 4096

WarmKey = tuple[Any, ...]
"""What a binary depends on besides its arguments: see :func:`warm_key`."""

_lock = threading.Lock()
_table: dict[WarmKey, tuple[tuple[Any, ...], Any]] = {}
_recorded = 0
_taken = 0


def device_index(device: torch.device) -> int:
    """The CUDA device index of ``device`` (the calling thread's current device when it
    names none: resolve it in the thread that chose the device, not in a build thread,
    whose current device is CUDA's default)."""
    if device.index is not None:
        return device.index
    return int(torch.cuda.current_device())


def warm_key(spec: TritonKernelSpec, device_idx: int) -> WarmKey:
    """The table key of ``spec`` built for CUDA device ``device_idx``: the digest of the
    source, the entry function, the constexprs, warps and stages. Two specs with equal
    keys compile to the same binary for equal argument specializations."""
    digest = hashlib.sha256(spec.source.encode("utf-8")).hexdigest()
    return (digest, spec.name, tuple(sorted(spec.constexprs.items())), spec.num_warps,
            spec.num_stages, device_idx)


def tensor_specialization(args: Sequence[torch.Tensor]) -> tuple[Any, ...]:
    """The launch key of tensor arguments ``args``: each tensor's dtype and whether its
    address is 16-byte aligned (what Triton specializes a pointer argument on, and what
    :func:`.triton_kernel.specialization_key` computes for a launch)."""
    return tuple((a.dtype, a.data_ptr() % 16 == 0) for a in args)


def record(key: WarmKey, specialization: tuple[Any, ...], compiled: Any) -> None:
    """Keep ``compiled``, built for argument ``specialization``, under ``key``
    (replacing an earlier binary of the same key)."""
    global _recorded
    with _lock:
        _table.pop(key, None)  # re-inserted last: the newest is dropped last
        _table[key] = (specialization, compiled)
        _recorded += 1
        while len(_table) > MAX_ENTRIES:
            del _table[next(iter(_table))]


def take(key: WarmKey, specialization: tuple[Any, ...]) -> Any | None:
    """The binary recorded under ``key`` when it was built for ``specialization``, else
    None. The entry stays (another graph or a second load of the program may launch the
    same kernel)."""
    global _taken
    with _lock:
        found = _table.get(key)
        if found is None or found[0] != specialization:
            return None
        _taken += 1
        return found[1]


def has_entries() -> bool:
    """Whether any binary was recorded (a launch skips the lookup, and hashing its
    source, when none was: ``precompile_triton`` off)."""
    return bool(_table)


def recorded_specialization(key: WarmKey) -> tuple[Any, ...] | None:
    """The argument specialization the binary under ``key`` was built for (None when
    there is none): what a diagnostic compares a launch's key with."""
    with _lock:
        found = _table.get(key)
    return None if found is None else found[0]


def stats() -> dict[str, int]:
    """``entries`` (binaries kept now), ``recorded`` and ``taken`` (since the start of
    the process, or :func:`clear`)."""
    with _lock:
        return {"entries": len(_table), "recorded": _recorded, "taken": _taken}


def clear() -> None:
    """Forget every binary and reset the counts (tests, diagnostics)."""
    global _recorded, _taken
    with _lock:
        _table.clear()
        _recorded = _taken = 0


__all__ = ["MAX_ENTRIES", "WarmKey", "clear", "device_index", "has_entries", "record",
           "recorded_specialization", "stats", "take", "tensor_specialization", "warm_key"]
