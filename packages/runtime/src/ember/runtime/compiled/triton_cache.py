"""The on-disk cache of Triton kernel sources.

A compiled artifact carries its Triton kernels as source text. To launch one, Triton's
JIT needs the source in a real file (it reads the function's source through
``inspect``), so each kernel is written once to::

    <cache root>/triton/<key>/kernel.py
    <cache root>/triton/<key>/manifest.json     {"sha256": <digest of kernel.py>, ...}

``key`` hashes the source, the Triton version, the torch version and the device
(capability, or ``interpret`` for Triton's CPU interpreter), so an upgrade of either
library or a different GPU never reuses an entry. Triton keeps the binaries it builds
from these files in its own cache (``TRITON_CACHE_DIR``), keyed by the same source.

Entries are written to a temporary directory and renamed into place, so a reader never
sees half an entry (the temporary directory is removed on failure too); an entry whose
manifest does not match its file, or that is a symbolic link, is treated as a miss, with a
warning, and rewritten (a link is removed, never followed). The cache's directories are
private (:mod:`.private_cache`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import torch
from ember.runtime.compiled.private_cache import (
    cache_subdir,
    process_dir,
    read_file,
    remove_entry,
)
from ember.runtime.config import config

_KERNEL_FILE = "kernel.py"
_MANIFEST_FILE = "manifest.json"
_process_dir: Path | None = None


class TritonCacheWarning(UserWarning):
    """A cache entry was unreadable or corrupt and has been rebuilt."""


def cache_root() -> Path:
    """The root of Ember's on-disk caches (``config.cache_dir``, ``EMBER_CACHE_DIR``).

    With the cache disabled (``EMBER_CACHE=0``) kernels still need a file to live in:
    they go to a temporary directory of this process instead, removed at exit.
    """
    global _process_dir
    if config.cache_enabled:
        return Path(config.cache_dir)
    if _process_dir is None:
        _process_dir = process_dir("ember-triton-")
    return _process_dir


def triton_version() -> str:
    """The installed Triton's version, ``none`` when Triton is not installed."""
    try:
        import triton
    except ImportError:
        return "none"
    return str(triton.__version__)


def device_tag(device: torch.device | None, interpret: bool) -> str:
    """What the compiled code depends on about ``device``: ``interpret`` for Triton's
    interpreter, else ``cuda-sm<major><minor>``."""
    if interpret or device is None or device.type != "cuda":
        return "interpret"
    major, minor = torch.cuda.get_device_capability(device)
    return f"cuda-sm{major}{minor}"


def cache_key(source: str, device: str) -> str:
    """The cache key of a kernel source for ``device`` (see :func:`device_tag`)."""
    h = hashlib.sha256()
    for part in (source, triton_version(), torch.__version__, device):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_entry(entry: Path, source: str | None = None) -> Path | None:
    """The kernel file of a valid entry (holding ``source``, when given); None when
    missing; raises ValueError if corrupt."""
    kernel = entry / _KERNEL_FILE
    manifest = entry / _MANIFEST_FILE
    if not os.path.lexists(entry):
        return None
    if os.path.islink(entry):
        raise ValueError(f"a symbolic link (to {os.readlink(entry)}), not a directory")
    try:
        recorded = json.loads(read_file(manifest).decode("utf-8"))["sha256"]
        actual = _digest(read_file(kernel))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"unreadable entry ({type(e).__name__}: {e})") from e
    if recorded != actual:
        raise ValueError("the kernel file does not match its manifest's digest")
    if source is not None and actual != _digest(source.encode("utf-8")):
        raise ValueError("the kernel file holds another kernel's source")
    return kernel


def _write_entry(entry: Path, source: str, device: str) -> None:
    """Write ``entry`` atomically: build it in a sibling temp dir, then rename."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name[:16]}-", dir=entry.parent))
    try:
        data = source.encode("utf-8")
        (tmp / _KERNEL_FILE).write_bytes(data)
        manifest = {
            "sha256": _digest(data),
            "triton": triton_version(),
            "torch": torch.__version__,
            "device": device,
        }
        (tmp / _MANIFEST_FILE).write_text(json.dumps(manifest, indent=1), "utf-8")
        try:
            os.rename(tmp, entry)
        except OSError:
            # Another process won the race and wrote the same entry; keep theirs.
            if _safe_read(entry) is None:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _safe_read(entry: Path) -> Path | None:
    try:
        return _read_entry(entry)
    except ValueError:
        return None


def kernel_source_path(source: str, device: str, root: Path | None = None) -> Path:
    """The path of a file holding ``source``, writing the cache entry on a miss.

    Args:
        source: the Triton kernel module's source text.
        device: the device tag (:func:`device_tag`) the kernel will run on.
        root: the cache root; :func:`cache_root` when None.

    Returns:
        the path of ``kernel.py`` in the cache entry.

    Warns:
        TritonCacheWarning: when an existing entry is corrupt; it is replaced.

    Raises:
        ember.runtime.compiled.private_cache.CacheDirError: the cache directory is not
            private to this user.
    """
    entry = cache_subdir(root or cache_root(), "triton") / cache_key(source, device)
    try:
        found = _read_entry(entry, source)
    except ValueError as e:
        warnings.warn(
            f"Ember: corrupt Triton cache entry {entry} ({e}); recompiling it",
            TritonCacheWarning,
            stacklevel=2,
        )
        remove_entry(entry)
        found = None
    if found is not None:
        return found
    _write_entry(entry, source, device)
    return entry / _KERNEL_FILE
