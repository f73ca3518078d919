"""The on-disk cache of autotuning decisions.

One JSON file per decision::

    <cache root>/autotune/<kind>-<sha256 of the entry key>.json

The cache root is the kernel cache's (``EMBER_CACHE_DIR``, default ``~/.cache/ember``;
a temporary directory of the process with ``EMBER_CACHE=0``). The entry key
(:class:`EntryKey`) is the choice's kind and key, the device (name and compute
capability) and the torch, Triton and ember-inductor versions, so a new GPU or an
upgrade times again. A file holds its whole entry key next to the choice and the
timings, and is used only when that key equals the one looked up.

The rules are the kernel cache's (``ember.runtime.compiled.private_cache``): the
directories are private to the user (created 0700; a directory that is a link, another
user's, or writable by others is refused with ``CacheDirError``); files are written
atomically and read without following links. An entry that is a link, belongs to
another user, cannot be parsed or does not match its key is a miss with an
:class:`AutotuneCacheWarning`, removed, and written again after timing.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from ember.runtime.compiled.private_cache import (
    cache_subdir,
    read_file,
    remove_entry,
    write_atomic,
)
from ember.runtime.compiled.triton_cache import cache_root, triton_version

FORMAT = 1
_KIND = re.compile(r"[a-z][a-z0-9_]*\Z")


class _CorruptEntry(Exception):
    """An entry that cannot be used (the message says why)."""


class AutotuneCacheWarning(UserWarning):
    """An autotune cache entry was unreadable, corrupt or not this user's; it was
    treated as a miss and removed."""


def cache_dir() -> Path:
    """The directory of the autotune cache (created private when missing).

    Raises:
        ember.runtime.compiled.private_cache.CacheDirError: it, or the cache root, is
            not private to this user.
    """
    return cache_subdir(cache_root(), "autotune")


def clear_cache() -> int:
    """Remove every autotune decision; returns how many entries there were.

    Raises:
        ember.runtime.compiled.private_cache.CacheDirError: as :func:`cache_dir`.
    """
    removed = 0
    for path in cache_dir().iterdir():
        remove_entry(path)
        removed += 1
    return removed


def versions() -> dict[str, str]:
    """The library versions a decision depends on."""
    try:
        inductor = importlib.metadata.version("ember-inductor")
    except importlib.metadata.PackageNotFoundError:
        inductor = "unknown"
    return {"torch": torch.__version__, "triton": triton_version(),
            "ember-inductor": inductor}


def device_description(device: torch.device) -> dict[str, object]:
    """What a decision depends on about ``device``: its type, and for a GPU its name
    and compute capability."""
    if device.type != "cuda":
        return {"type": device.type}
    major, minor = torch.cuda.get_device_capability(device)
    return {"type": "cuda", "name": torch.cuda.get_device_name(device),
            "capability": [major, minor]}


@dataclass(frozen=True)
class EntryKey:
    """Everything a decision depends on (all JSON values)."""

    kind: str
    key: object
    device: dict[str, object]
    versions: dict[str, str]

    def __post_init__(self) -> None:
        if not _KIND.match(self.kind):
            raise ValueError(f"autotune kind {self.kind!r} is not a lowercase word "
                             "(it names the cache files)")

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "key": self.key, "device": self.device,
                "versions": self.versions}

    def digest(self) -> str:
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def key_text(self) -> str:
        """The key in one line, for log messages."""
        return json.dumps(self.key, sort_keys=True, separators=(",", ":"))

    def path(self) -> Path:
        return cache_dir() / f"{self.kind}-{self.digest()}.json"


def lookup(entry: EntryKey) -> str | None:
    """The stored choice for ``entry``, or None on a miss.

    Warns:
        AutotuneCacheWarning: the entry's file is a link, another user's, or corrupt
            (it is removed: a miss).
    """
    path = entry.path()
    if not os.path.lexists(path):
        return None
    try:
        return _read(path, entry)
    except _CorruptEntry as e:
        warnings.warn(f"Ember: autotune cache entry {path} {e}; timing the candidates "
                      "again", AutotuneCacheWarning, stacklevel=3)
        remove_entry(path)
        return None


def _read(path: Path, entry: EntryKey) -> str:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise _CorruptEntry(f"is a symbolic link (to {os.readlink(path)})")
    if not stat.S_ISREG(st.st_mode):
        raise _CorruptEntry("is not a regular file")
    if st.st_uid != os.getuid():
        raise _CorruptEntry(f"belongs to another user (uid {st.st_uid}, not {os.getuid()})")
    try:
        data = json.loads(read_file(path).decode("utf-8"))
    except (OSError, ValueError) as e:
        raise _CorruptEntry(f"is unreadable ({type(e).__name__}: {e})") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _CorruptEntry(f"is not a format-{FORMAT} autotune entry")
    recorded = {name: data.get(name) for name in ("kind", "key", "device", "versions")}
    if recorded != entry.to_json():
        raise _CorruptEntry("holds the decision of another key")
    choice = data.get("choice")
    if not isinstance(choice, str):
        raise _CorruptEntry("has no choice")
    return choice


def store(entry: EntryKey, choice: str, timings_ms: dict[str, float | None]) -> None:
    """Write the decision ``choice`` for ``entry`` (atomically), with the timings it
    was made from (None: the candidate failed).

    Raises:
        ember.runtime.compiled.private_cache.CacheDirError: the cache directory is not
            private to this user.
    """
    data = {"format": FORMAT, **entry.to_json(), "choice": choice,
            "timings_ms": timings_ms}
    text = json.dumps(data, indent=1, sort_keys=True)
    write_atomic(entry.path(), text.encode("utf-8"))
