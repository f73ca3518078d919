"""Calling a C++ kernel of many arguments with them packed in one buffer.

ctypes converts every argument of every call (``c_void_p.from_param`` makes an object per
argument, ~50 ns): an optimizer step's C++ kernels take hundreds of pointers, so the
conversion alone was ~11 us of a 209-argument call. Instead, :func:`packed_call` packs a
kernel's data pointers and sizes with one precompiled :class:`struct.Struct` into a
``bytes`` object (~20 ns a value, one C loop), which ctypes passes as a pointer without
copying, to a *trampoline*: ``ember_call_<B>(f, a)`` calls the function at address ``f``
with the ``B`` 64-bit values at ``a``. The trampolines (``B`` = 8, 16, ..., 1024) are one
small library, built once through the kernel cache (:func:`.cpp_build.compile_cpp`, so
once per machine while the cache is on) and loaded once per process; a kernel of ``n``
arguments goes through the smallest ``B >= n``, its buffer zero-padded to ``B`` values.

What this relies on, true of the C calling conventions of x86-64 (System V) and AArch64
(AAPCS64), the only machines it is used on:

* a pointer and an ``int64_t`` argument travel alike (the same integer register, or the
  next 8-byte stack slot), so the trampoline may pass a kernel's ``float*`` as a 64-bit
  integer, which is what ctypes's ``c_void_p`` already did at this boundary;
* the caller reserves and releases the stack arguments, so a function of ``n``
  parameters called with ``B >= n`` arguments reads its ``n`` and ignores the rest.

A probe in the library checks both once per process (register and stack arguments, the
smallest and largest trampolines); where the build or the probe fails, or on another
machine, :func:`packed_call` answers None and the launcher calls through ctypes as before.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import struct
from dataclasses import dataclass
from typing import Any

from ember.runtime.logs import log

__all__ = ["BUCKETS", "MIN_ARGS", "PackedCall", "packed_call", "trampolines_source"]

MIN_ARGS = 32
"""Kernels of fewer arguments are called through ctypes: the saving (~30 ns an argument)
is then below a microsecond, and programs of small kernels never build the library."""

BUCKETS = (8, 16, 32, 64, 128, 256, 512, 1024)
"""Argument counts of the trampolines (1024: what ctypes itself can pass)."""

_MACHINES = frozenset({"x86_64", "amd64", "aarch64", "arm64"})
_PROBE_VALUES = 11  # more than the 6 (x86-64) or 8 (AArch64) argument registers


@dataclass(frozen=True, slots=True)
class PackedCall:
    """How to call one kernel packed: ``run(address, pack(*pointers, *sizes))``."""

    run: Any  # the trampoline: a ctypes function of (void* f, const int64_t* a)
    address: int  # the kernel's entry point
    pack: Any  # struct.Struct(...).pack: the values, zero-padded to the bucket


def trampolines_source() -> str:
    """The library's C++ source: one trampoline a bucket, and the probe."""
    lines = ["#include <cstdint>", "typedef std::int64_t ember_i64;"]
    for b in BUCKETS:
        params = ", ".join(["ember_i64"] * b)
        args = ", ".join(f"a[{i}]" for i in range(b))
        lines.append(f'extern "C" void ember_call_{b}(void* f, const ember_i64* a) '
                     f"{{ reinterpret_cast<void (*)({params})>(f)({args}); }}")
    params = ", ".join(f"ember_i64 v{i}" for i in range(_PROBE_VALUES))
    body = " ".join(f"out[{i}] = v{i};" for i in range(_PROBE_VALUES))
    lines.append(f'extern "C" void ember_probe(ember_i64* out, {params}) {{ {body} }}')
    return "\n".join(lines) + "\n"


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The trampolines, built and probed once per process; None where unusable."""
    if platform.machine().lower() not in _MACHINES:
        return None
    from ember.runtime.compiled.cpp_build import compile_cpp

    try:
        lib = ctypes.CDLL(str(compile_cpp(trampolines_source(), "the C++ call trampolines")))
        for b in BUCKETS:
            fn = getattr(lib, f"ember_call_{b}")
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        if _probe(lib):
            return lib
        log("cache", "C++ call trampolines: the probe failed; kernels are called by ctypes")
    except Exception as e:  # noqa: BLE001 - an optimization only: ctypes still works
        log("cache", f"C++ call trampolines unavailable ({e}); kernels are called by ctypes")
    return None


def _probe(lib: ctypes.CDLL) -> bool:
    """Whether the smallest and the largest trampolines hand the probe a pointer and
    values (some past the argument registers) exactly."""
    out = (ctypes.c_int64 * _PROBE_VALUES)()
    values = [(-1) ** i * (0x1234_5678_9ABC + i) for i in range(_PROBE_VALUES)]
    address = ctypes.cast(lib.ember_probe, ctypes.c_void_p).value
    for b in (16, BUCKETS[-1]):
        out[:] = [0] * _PROBE_VALUES
        packed = struct.pack(f"@Q{_PROBE_VALUES}q{(b - 1 - _PROBE_VALUES) * 8}x",
                             ctypes.addressof(out), *values)
        getattr(lib, f"ember_call_{b}")(address, packed)
        if list(out) != values:
            return False
    return True


def packed_call(fn: Any, n_pointers: int, n_sizes: int) -> PackedCall | None:
    """The packed call of the ctypes function ``fn`` (``n_pointers`` pointers, then
    ``n_sizes`` ``int64_t``), or None: fewer than :data:`MIN_ARGS` arguments, more than
    the largest trampoline takes, or no usable library (see the module doc)."""
    n = n_pointers + n_sizes
    if n < MIN_ARGS or n > BUCKETS[-1]:
        return None
    lib = _library()
    if lib is None:
        return None
    bucket = next(b for b in BUCKETS if b >= n)
    # NOTE: data pointers as unsigned ("Q"), sizes signed ("q"); "x": zero bytes
    layout = struct.Struct(f"@{n_pointers}Q{n_sizes}q{(bucket - n) * 8}x")
    address = ctypes.cast(fn, ctypes.c_void_p).value
    assert address is not None
    return PackedCall(getattr(lib, f"ember_call_{bucket}"), address, layout.pack)
