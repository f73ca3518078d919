"""Compiling generated C++ kernels with the system compiler, cached on disk.

A kernel's shared library lives at::

    <cache root>/cpp/<key>/kernel.so
    <cache root>/cpp/<key>/kernel.cpp        the source, for reading
    <cache root>/cpp/<key>/manifest.json     {"key": <key>, "library": "kernel.so",
                                              "sha256": <digest of the library>, ...}

``key`` hashes the source, the compiler's version line, the flags, the CPU model
(``-march=native``) and the torch version. The version line and the flags (libmvec
found or not) come from two subprocesses, which a warm start (no build) does not spawn:
their answer is kept in ``<cache root>/toolchain/cpp.json`` until the compiler's binary
or the loader's library cache changes (:func:`_toolchain`).
The compiler runs in a temporary directory beside the entries (removed on success and
failure alike); the files are then written to temporary names and moved into place with
``os.replace`` (the manifest last), so concurrent writers are safe and a reader never
trusts half an entry. An entry whose manifest is missing or does not match its library (a
truncated ``kernel.so``, a symbolic link) or its folder (entries swapped), or whose folder
belongs to another user or is writable by others, is a miss, with a :class:`CppCacheWarning`, and
is rebuilt under a new library name (``kernel-<random>.so``, recorded in the manifest).
The cache's directories are private (:mod:`.private_cache`).
"""

from __future__ import annotations

import ctypes.util
import functools
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import stat
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from ember.runtime.compiled.private_cache import (
    CacheDirError,
    cache_subdir,
    fresh_entry_dir,
    process_dir,
    read_file,
    write_atomic,
)
from ember.runtime.config import config
from ember.runtime.logs import log
from ember.runtime.phases import count

COMPILER = "g++"
FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-shared",
                          "-fPIC", "-std=c++17", "-w")


def vector_math_flags() -> tuple[str, ...]:
    """Link glibc's vector math library when present (the kernels' prelude then declares
    its functions, so loops calling exp/log/tanh/... vectorize). Found once per process
    (:func:`_toolchain`)."""
    return _toolchain().vector_math_flags


def build_flags() -> tuple[str, ...]:
    """Every flag of the compiler command (part of the cache key)."""
    return FLAGS + vector_math_flags()

_process_dir: Path | None = None


class CppCacheWarning(UserWarning):
    """A cached kernel library was unreadable or corrupt and has been rebuilt."""


class CppCompileError(RuntimeError):
    """The C++ compiler rejected a generated kernel."""


def compiler_version() -> str:
    """The first line of ``g++ --version`` (once per process, :func:`_toolchain`).

    Raises:
        CppCompileError: when no C++ compiler is installed.
    """
    version = _toolchain().compiler_version
    if version is None:
        raise CppCompileError(f"no C++ compiler: {COMPILER!r} is not on PATH")
    return version


def cache_dir() -> Path:
    """Where libraries go: ``<config.cache_dir>/cpp``, or a per-process temporary
    directory when the cache is disabled (``EMBER_CACHE=0``), removed at exit.

    Raises:
        ember.runtime.compiled.private_cache.CacheDirError: the cache directory is not
            private to this user.
    """
    global _process_dir
    if config.cache_enabled:
        return cache_subdir(Path(config.cache_dir), "cpp")
    if _process_dir is None:
        _process_dir = process_dir("ember-cpp-")
    return _process_dir


@dataclass(frozen=True)
class Toolchain:
    """What the cache keys and builds take from the system besides the source."""

    compiler_version: str | None  # the first line of ``g++ --version``; None: no g++
    vector_math_flags: tuple[str, ...]  # _MVEC_FLAGS when glibc's libmvec is installed


_MVEC_FLAGS = ("-DEMBER_HAVE_MVEC", "-lmvec")
# <cache root>/toolchain/cpp.json: its own folder (cpp/ holds only entries)
_TOOLCHAIN_DIR, _TOOLCHAIN_FILE = "toolchain", "cpp.json"
LD_CACHE = "/etc/ld.so.cache"  # what ``ldconfig -p`` (find_library) reads


def _probe() -> Toolchain:
    """Ask the system: two subprocesses (``g++ --version``, ``ldconfig -p``), ~7 ms."""
    version: str | None = None
    if shutil.which(COMPILER) is not None:
        out = subprocess.run([COMPILER, "--version"], capture_output=True, text=True,
                             check=True)
        version = out.stdout.splitlines()[0] if out.stdout else COMPILER
    mvec = _MVEC_FLAGS if ctypes.util.find_library("mvec") is not None else ()
    return Toolchain(version, mvec)


def file_stamp(path: str) -> list[str | int]:
    """What changes when the file at ``path`` (links followed) is replaced, rewritten or
    reached through another link: its resolved path, device, inode, size, times."""
    st = os.stat(path)
    return [os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
            st.st_ctime_ns]


@functools.cache
def _toolchain() -> Toolchain:
    """:func:`_probe`'s answer, once per process, remembered across processes.

    A warm start needs the answer for the cache keys of its kernels but never runs the
    compiler, so the answer is kept in ``<cache>/toolchain/cpp.json`` with the stamps
    (:func:`file_stamp`) of the compiler's binary and of the loader's library cache: a
    process whose stamps match reads it (~0.1 ms) instead of spawning both processes. A
    new or changed compiler (an upgrade, another ``g++`` first on ``PATH``, a switched
    alternative) or a rebuilt library cache (``ldconfig``, run when libraries are
    installed) changes a stamp, and the system is asked again. Only an answer that
    found libmvec is kept (the other one is also found by ``gcc`` and
    ``LD_LIBRARY_PATH``, which no stamp covers); with the cache off, or no compiler,
    nothing is kept.
    """
    compiler = shutil.which(COMPILER)
    if compiler is None or not config.cache_enabled:
        return _probe()
    try:
        stamps: dict[str, object] = {
            "compiler": file_stamp(compiler), "ld.so.cache": file_stamp(LD_CACHE),
            "machine": platform.machine()}
        memo = cache_subdir(Path(config.cache_dir), _TOOLCHAIN_DIR) / _TOOLCHAIN_FILE
    except (OSError, CacheDirError) as e:
        log("cache", f"C++ toolchain not remembered ({type(e).__name__}: {e})")
        return _probe()
    remembered = _remembered(memo, stamps)
    if remembered is not None:
        return remembered
    found = _probe()
    if found.compiler_version is not None and found.vector_math_flags == _MVEC_FLAGS:
        record = {"stamps": stamps, "compiler": found.compiler_version,
                  "vector_math_flags": list(found.vector_math_flags)}
        try:
            write_atomic(memo, json.dumps(record).encode())
        except OSError as e:
            log("cache", f"C++ toolchain not remembered ({type(e).__name__}: {e})")
    return found


def _remembered(memo: Path, stamps: dict[str, object]) -> Toolchain | None:
    """The toolchain of ``memo`` when its stamps are ``stamps``; else None (logged)."""
    try:
        record = json.loads(read_file(memo))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log("cache", f"C++ toolchain record {memo} unreadable ({type(e).__name__}: {e})")
        return None
    if not isinstance(record, dict) or record.get("stamps") != stamps:
        log("cache", "C++ toolchain changed (or its record is malformed): asking again")
        return None
    version, flags = record.get("compiler"), record.get("vector_math_flags")
    if not isinstance(version, str) or flags != list(_MVEC_FLAGS):
        log("cache", f"C++ toolchain record {memo} malformed: asking again")
        return None
    return Toolchain(version, _MVEC_FLAGS)


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


# The library's file name: ``kernel.so``, or ``kernel-<random>.so`` when it replaces a
# corrupt one (see compile_cpp).
_LIBRARY_NAME = re.compile(r"kernel(-[0-9a-f]{16})?\.so")


class _CorruptEntry(Exception):
    """A cache entry whose manifest is unreadable or does not match its library."""

    def __init__(self, library: Path | None) -> None:
        super().__init__(str(library))
        self.library = library


def _cached_library(entry: Path) -> Path | None:
    """The library of a complete, intact entry; None when there is no manifest yet.

    Raises:
        _CorruptEntry: the manifest is unreadable, names no valid library, or the
            library's SHA-256 differs from the recorded one (a truncated file, a link).
    """
    if not os.path.lexists(entry):
        return None
    st = os.lstat(entry)
    if not stat.S_ISDIR(st.st_mode):
        raise _CorruptEntry(None)  # a symbolic link or a file: never followed
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _CorruptEntry(None)  # another user's, or writable by others: not loaded
    manifest = entry / "manifest.json"
    if not os.path.lexists(manifest):
        return None  # never written, or another process is writing it right now
    library: Path | None = None
    try:
        record = json.loads(read_file(manifest))
        if isinstance(record, dict) and "key" not in record:
            return None  # written before manifests named their key: built again, quietly
        name = record.get("library", "kernel.so")
        # (the key binds the entry to its folder: two entries swapped are corrupt)
        if isinstance(name, str) and _LIBRARY_NAME.fullmatch(name) and (
                record.get("key") == entry.name):
            library = entry / name
            if record["sha256"] == hashlib.sha256(read_file(library)).hexdigest():
                return library
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    raise _CorruptEntry(library)


def compile_cpp(source: str, what: str = "a generated kernel") -> Path:
    """The shared library built from ``source`` (from the cache when present).

    ``what`` names the kernels in the source for the error message. Builds and cache
    hits are counted in the stage profile (:mod:`ember.runtime.phases`). Safe to call
    from several threads at once (:mod:`.parallel_build` does).

    A corrupt entry is rebuilt under a new library name: a process that loaded the old
    file keeps it mapped, and ``dlopen`` of a name it already loaded would return the
    old (truncated) library instead of the new one.

    Raises:
        CppCompileError: with the compiler's message when compilation fails.
        ember.runtime.compiled.private_cache.CacheDirError: the cache directory is not
            private to this user.
    """
    entries = cache_dir()
    entry = entries / cache_key(source)
    replaced: Path | None = None
    try:
        found = _cached_library(entry)
    except _CorruptEntry as e:
        warnings.warn(f"corrupt C++ kernel cache entry {entry}; rebuilding", CppCacheWarning,
                      stacklevel=2)
        found, replaced = None, e.library
        library_name = f"kernel-{secrets.token_hex(8)}.so"
    else:
        library_name = "kernel.so"
    if found is not None:
        log("cache", f"C++ kernel cache hit {entry.name[:16]}")
        count("cpp cache hits")
        return found
    log("cache", f"C++ kernel cache miss {entry.name[:16]}")
    count("cpp builds")
    with tempfile.TemporaryDirectory(dir=entries, prefix=".build-") as tmp:
        src = Path(tmp) / "kernel.cpp"
        src.write_text(source)
        out = Path(tmp) / "kernel.so"
        proc = subprocess.run([COMPILER, *FLAGS, str(src), "-o", str(out),
                               *vector_math_flags()],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise CppCompileError(
                f"g++ failed to compile {what}:\n{proc.stderr[-4000:]}")
        lib_bytes = out.read_bytes()
    fresh_entry_dir(entry)
    write_atomic(entry / "kernel.cpp", source.encode())
    write_atomic(entry / library_name, lib_bytes)
    manifest = {"key": entry.name, "library": library_name,
                "sha256": hashlib.sha256(lib_bytes).hexdigest(),
                "compiler": compiler_version(), "flags": list(build_flags()),
                "torch": torch.__version__}
    write_atomic(entry / "manifest.json", json.dumps(manifest).encode())
    if replaced is not None and replaced.name != library_name:
        replaced.unlink(missing_ok=True)  # processes that loaded it keep their mapping
    return entry / library_name
