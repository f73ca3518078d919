"""Triton binaries kept in Ember's cache, loaded without Triton's compiler.

A process that loads a program from the whole-program cache (or compiles a program whose
kernels an earlier process built) still met Triton's JIT at each kernel's first launch:
Triton's on-disk cache hit costs the cache key (the first one in a process hashes
Triton's own files, half a gigabyte of ``libtriton``: about 0.5 s), the kernel's AST
and its dependencies hashed, and every stage of IR read back from disk (TTIR, TTGIR,
LLIR, PTX and the binary) — per kernel, serially, on the first call.

This module keeps what a launch needs and nothing else, under::

    <cache root>/triton-binaries/<key>/kernel.json       Triton's metadata of the binary
    <cache root>/triton-binaries/<key>/kernel.<ext>      the binary (``cubin`` on CUDA)
    <cache root>/triton-binaries/<key>/manifest.json     {"sha256": {file: digest}, ...}

and :func:`load` turns an entry back into Triton's compiled-kernel object, whose
launcher and device module are made at its first use (as for a kernel Triton's JIT
built). ``key`` (:func:`entry_key`) hashes what the binary depends on: the kernel source,
its entry point, constexprs, warps and stages, the argument specialization it was built
for (each tensor's dtype and 16-byte alignment: :func:`.triton_kernel.specialization_key`),
the device's compute capability, the Triton and torch versions and the environment
variables that Triton says change its output (``get_cache_invalidating_env_vars``).

Only kernels whose arguments are all tensors (:func:`.triton_kernel.warmable`) are kept:
their launcher follows from the signature alone (Triton specializes integer arguments on
their values, which the launch-time key would have to carry into the launcher).

An entry is written to a temporary directory and renamed into place; an entry whose
files do not match its manifest, or that is a symbolic link, is a miss with a warning
and is removed (never followed). The directory is private like the rest of the cache
(:mod:`.private_cache`). Every failure to store or load is logged under ``cache`` and the
kernel goes through Triton's JIT as before: this is a shortcut, never the only path.
Counts: ``triton binaries stored`` and ``triton binaries loaded``, in the compile profile
when a compile is running (``ember.runtime.phases``) and for the whole process
(:func:`stats`: a program loaded from the cache launches outside any compile).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from ember.runtime.compiled.private_cache import cache_subdir, read_file, remove_entry
from ember.runtime.compiled.triton_cache import cache_root, triton_version
from ember.runtime.logs import log
from ember.runtime.phases import count

if TYPE_CHECKING:
    from ember.runtime.compiled.triton_kernel import TritonKernelSpec

#: the layout of an entry; a change of layout changes every key
FORMAT = 1
_SUBDIR = "triton-binaries"
_METADATA = "kernel.json"
_MANIFEST = "manifest.json"
_lock = threading.Lock()
_stats = {"stored": 0, "loaded": 0}


class StoredBinaryWarning(UserWarning):
    """An entry of the Triton binary store was corrupt and has been removed."""


def _invalidating_env() -> str:
    """Triton's own list of the environment variables that change what it builds."""
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars
    except ImportError:  # a Triton without the list: only the version counts
        return ""
    return repr(sorted(get_cache_invalidating_env_vars().items()))


def entry_key(spec: TritonKernelSpec, capability: tuple[int, int],
              specialization: Sequence[Any]) -> str:
    """The store's key of ``spec`` built for a device of ``capability`` with the
    argument ``specialization`` (the launch key of its tensor arguments)."""
    h = hashlib.sha256()
    parts = (f"format {FORMAT}", spec.source, spec.name,
             repr(sorted(spec.constexprs.items())), f"warps {spec.num_warps}",
             f"stages {spec.num_stages}", repr(tuple(specialization)),
             f"sm {capability[0]}.{capability[1]}", triton_version(), torch.__version__,
             _invalidating_env())
    for part in parts:
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def device_capability(device: torch.device) -> tuple[int, int]:
    """The compute capability of the CUDA ``device``."""
    major, minor = torch.cuda.get_device_capability(device)
    return int(major), int(minor)


def _entry(spec: TritonKernelSpec, device: torch.device,
           specialization: Sequence[Any]) -> Path:
    key = entry_key(spec, device_capability(device), specialization)
    return cache_subdir(cache_root(), _SUBDIR) / key


def _binary_files(compiled: Any) -> tuple[bytes, str, bytes] | None:
    """The metadata JSON, the binary's extension and the binary of a compiled kernel of
    Triton's (None when it does not have them where this Triton keeps them)."""
    group = getattr(compiled, "metadata_group", None)
    asm = getattr(compiled, "asm", None)
    if not isinstance(group, dict) or asm is None:
        return None
    metadata = [p for name, p in group.items() if str(name).endswith(".json")]
    binaries = [(Path(p).suffix[1:], asm.get(Path(p).suffix[1:])) for name, p in group.items()
                if not str(name).endswith(".json")]
    binary = [(ext, data) for ext, data in binaries if isinstance(data, bytes)]
    if len(metadata) != 1 or len(binary) != 1:
        return None
    return Path(metadata[0]).read_bytes(), binary[0][0], binary[0][1]


def store(spec: TritonKernelSpec, device: torch.device, specialization: Sequence[Any],
          compiled: Any) -> bool:
    """Keep the binary of ``compiled`` (Triton's compiled kernel of ``spec`` for the
    CUDA ``device`` and argument ``specialization``) for :func:`load`. Returns whether
    an entry exists now; a failure is logged under ``cache``, never raised."""
    try:
        files = _binary_files(compiled)
        if files is None:
            log("cache", f"Triton kernel {spec.name}: no binary to store (this Triton "
                         "keeps its compiled kernels another way)")
            return False
        entry = _entry(spec, device, specialization)
        if os.path.isdir(entry) and not os.path.islink(entry):
            return True
        metadata, ext, binary = files
        _write(entry, {_METADATA: metadata, f"kernel.{ext}": binary})
    except Exception as e:  # noqa: BLE001 - the store is a shortcut: JIT still works
        log("cache", f"Triton kernel {spec.name}: binary not stored "
                     f"({type(e).__name__}: {e})")
        return False
    _counted("stored")
    return True


def _counted(what: str) -> None:
    count(f"triton binaries {what}")
    with _lock:
        _stats[what] += 1


def stats() -> dict[str, int]:
    """``stored`` and ``loaded``: binaries this process stored and loaded."""
    with _lock:
        return dict(_stats)


def _write(entry: Path, files: dict[str, bytes]) -> None:
    """Write ``entry`` atomically: its files and manifest in a sibling temporary
    directory, renamed into place (a concurrent writer of the same entry wins)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name[:16]}-", dir=entry.parent))
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        manifest = {"sha256": {n: hashlib.sha256(d).hexdigest() for n, d in files.items()},
                    "triton": triton_version(), "torch": torch.__version__}
        (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=1), "utf-8")
        try:
            os.rename(tmp, entry)
        except OSError:
            if not os.path.isdir(entry):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _verified(entry: Path) -> dict[str, Path] | None:
    """The files of a valid entry, by name (None when there is no entry).

    Raises:
        ValueError: the entry is a link, unreadable, or its files do not match its
            manifest.
    """
    if not os.path.lexists(entry):
        return None
    if os.path.islink(entry) or not os.path.isdir(entry):
        raise ValueError("not a directory")
    try:
        digests = json.loads(read_file(entry / _MANIFEST).decode("utf-8"))["sha256"]
        names = sorted(digests)
        actual = {n: hashlib.sha256(read_file(entry / n)).hexdigest() for n in names}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"unreadable ({type(e).__name__}: {e})") from e
    if actual != digests or _METADATA not in names or len(names) != 2:
        raise ValueError("its files do not match its manifest")
    return {n: entry / n for n in names}


def load(spec: TritonKernelSpec, fn: Any, device: torch.device,
         specialization: Sequence[Any]) -> Any | None:
    """Triton's compiled kernel of ``spec`` (whose ``@triton.jit`` function is ``fn``,
    or its :class:`~.triton_header.KernelHeader`: only the name and parameters are read)
    for the CUDA ``device`` and argument ``specialization``, from the store; None on a
    miss or when this Triton cannot take it (logged under ``cache``). The binary is
    loaded onto the device, and its launcher made, at the first use of the result's
    ``run`` (as for a kernel Triton's JIT built)."""
    try:
        entry = _entry(spec, device, specialization)
        try:
            files = _verified(entry)
        except ValueError as e:
            warnings.warn(f"Ember: corrupt Triton binary entry {entry} ({e}); removed, "
                          "the kernel is built again", StoredBinaryWarning, stacklevel=2)
            remove_entry(entry)
            return None
        if files is None:
            return None
        compiled = _compiled_kernel(spec, fn, files)
    except Exception as e:  # noqa: BLE001 - the store is a shortcut: JIT still works
        log("cache", f"Triton kernel {spec.name}: stored binary not used "
                     f"({type(e).__name__}: {e})")
        return None
    _counted("loaded")
    return compiled


def ast_source(spec: TritonKernelSpec, fn: Any) -> Any:
    """Triton's source object of ``spec`` (whose ``@triton.jit`` function, or header, is
    ``fn``):
    every parameter typed by the spec's signature, in the function's order, and the
    constexprs by value. What :func:`.triton_aot.build_for_target` compiles, and, for a
    kernel of tensor arguments, what Triton's JIT makes the kernel's launcher from.

    Raises:
        ValueError: a parameter of ``fn`` is neither in the signature nor a constexpr.
    """
    from triton.compiler import ASTSource

    signature: dict[str, str] = dict(spec.signature)
    for name in spec.constexprs:
        signature[name] = "constexpr"
    ordered = {name: signature[name] for name in fn.arg_names if name in signature}
    missing = set(fn.arg_names) - set(ordered)
    if missing:
        raise ValueError(f"Triton kernel {spec.name}: parameters {sorted(missing)} are "
                         "neither in the signature nor constexprs")
    return ASTSource(fn, signature=ordered, constexprs=dict(spec.constexprs))


def _compiled_kernel(spec: TritonKernelSpec, fn: Any, files: dict[str, Path]) -> Any:
    """Triton's ``CompiledKernel`` over an entry's files, with the launcher source of
    :func:`ast_source`."""
    from triton.compiler.compiler import CompiledKernel

    source = ast_source(spec, fn)
    group = {f"{spec.name}{path.suffix}": str(path) for path in files.values()}
    digest = hashlib.sha256(read_file(files[_METADATA])).hexdigest()
    return CompiledKernel(source, group, digest)


def stored_binaries(root: Path | None = None) -> int:
    """How many binaries the store under cache root ``root`` (default: this process's,
    :func:`.triton_cache.cache_root`) holds."""
    folder = (cache_root() if root is None else root) / _SUBDIR
    if not folder.is_dir():
        return 0
    return sum(1 for p in folder.iterdir() if not p.name.startswith("."))


__all__ = ["FORMAT", "StoredBinaryWarning", "ast_source", "device_capability", "entry_key",
           "load", "stats", "store", "stored_binaries"]
