"""Compiling generated C++ kernels with the system compiler, cached on disk.

A kernel's shared library lives at::

    <cache root>/cpp/<key>/kernel.so
    <cache root>/cpp/<key>/manifest.json     {"sha256": <digest of kernel.so>, ...}

``key`` hashes the source, the compiler's version line, the flags, the CPU model
(``-march=native``) and the torch version.
Both files are written to temporary names and moved into place with ``os.replace`` (the
manifest last), so concurrent writers are safe and a reader never trusts half an entry;
an entry whose manifest is missing or does not match its library is a miss, with a
:class:`CppCacheWarning`, and is rebuilt.
"""

from __future__ import annotations

import ctypes.util
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

import torch
from ember.runtime.config import config
from ember.runtime.logs import log

COMPILER = "g++"
FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-shared",
                          "-fPIC", "-std=c++17", "-w")


@functools.cache
def vector_math_flags() -> tuple[str, ...]:
    """Link glibc's vector math library when present (the kernels' prelude then declares
    its functions, so loops calling exp/log/tanh/... vectorize)."""
    if ctypes.util.find_library("mvec") is None:
        return ()
    return ("-DEMBER_HAVE_MVEC", "-lmvec")


def build_flags() -> tuple[str, ...]:
    """Every flag of the compiler command (part of the cache key)."""
    return FLAGS + vector_math_flags()

_process_dir: Path | None = None


class CppCacheWarning(UserWarning):
    """A cached kernel library was unreadable or corrupt and has been rebuilt."""


class CppCompileError(RuntimeError):
    """The C++ compiler rejected a generated kernel."""


@functools.cache
def compiler_version() -> str:
    """The first line of ``g++ --version``.

    Raises:
        CppCompileError: when no C++ compiler is installed.
    """
    if shutil.which(COMPILER) is None:
        raise CppCompileError(f"no C++ compiler: {COMPILER!r} is not on PATH")
    out = subprocess.run([COMPILER, "--version"], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()[0] if out.stdout else COMPILER


def cache_dir() -> Path:
    """Where libraries go: ``<config.cache_dir>/cpp``, or a per-process temporary
    directory when the cache is disabled (``EMBER_CACHE=0``)."""
    global _process_dir
    if config.cache_enabled:
        return Path(config.cache_dir) / "cpp"
    if _process_dir is None:
        _process_dir = Path(tempfile.mkdtemp(prefix="ember-cpp-"))
    return _process_dir


@functools.cache
def host_cpu() -> str:
    """The machine and CPU model (``-march=native`` code is specific to it)."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.machine()} {model}"


def cache_key(source: str) -> str:
    """The cache key of ``source`` under this compiler, flags, CPU and torch."""
    h = hashlib.sha256()
    for part in (source, compiler_version(), " ".join(build_flags()), host_cpu(),
                 torch.__version__):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _valid(entry: Path) -> bool:
    lib, manifest = entry / "kernel.so", entry / "manifest.json"
    if not manifest.exists():
        return False  # never written, or another process is writing it right now
    try:
        recorded = json.loads(manifest.read_text())["sha256"]
        if recorded == _digest(lib):
            return True
    except (OSError, ValueError, KeyError, TypeError):
        pass
    warnings.warn(f"corrupt C++ kernel cache entry {entry}; rebuilding", CppCacheWarning,
                  stacklevel=3)
    return False


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def compile_cpp(source: str) -> Path:
    """The shared library built from ``source`` (from the cache when present).

    Raises:
        CppCompileError: with the compiler's message when compilation fails.
    """
    entry = cache_dir() / cache_key(source)
    if _valid(entry):
        log("cache", f"C++ kernel cache hit {entry.name[:16]}")
        return entry / "kernel.so"
    log("cache", f"C++ kernel cache miss {entry.name[:16]}")
    entry.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=entry, prefix="build-") as tmp:
        src = Path(tmp) / "kernel.cpp"
        src.write_text(source)
        out = Path(tmp) / "kernel.so"
        proc = subprocess.run([COMPILER, *FLAGS, str(src), "-o", str(out),
                               *vector_math_flags()],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise CppCompileError(
                f"g++ failed to compile a generated kernel:\n{proc.stderr[-4000:]}")
        lib_bytes = out.read_bytes()
    _write_atomic(entry / "kernel.cpp", source.encode())
    _write_atomic(entry / "kernel.so", lib_bytes)
    manifest = {"sha256": hashlib.sha256(lib_bytes).hexdigest(),
                "compiler": compiler_version(), "flags": list(build_flags()),
                "torch": torch.__version__}
    _write_atomic(entry / "manifest.json", json.dumps(manifest).encode())
    return entry / "kernel.so"
