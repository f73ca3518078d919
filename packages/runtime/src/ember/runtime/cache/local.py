"""The local program cache: one file an entry under ``<EMBER_CACHE_DIR>/programs/``.

The kernel cache's rules hold here too (:mod:`ember.runtime.compiled.private_cache`):
the directory is private to the user (created 0700; one that is a link, belongs to
another user or is writable by others raises ``CacheDirError``), entries are written to
a temporary name and moved into place with ``os.replace`` (a concurrent writer never
leaves half an entry), and read with ``O_NOFOLLOW``. An entry that is a link, belongs to
another user or does not decode (:mod:`.entry`) is a miss with a
:class:`ProgramCacheWarning`, and is removed (the link itself, never its target).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ember.runtime.compiled.private_cache import (
    cache_subdir,
    read_file,
    remove_entry,
    write_atomic,
)

SUBDIR = "programs"
SUFFIX = ".entry"


class ProgramCacheWarning(UserWarning):
    """A program cache entry could not be used (corrupt, foreign, badly signed) or the
    remote cache could not be reached; the program is compiled instead."""


@dataclass(frozen=True)
class LocalUsage:
    """What ``cache info`` reports about the local cache."""

    directory: Path
    entries: int
    bytes: int


class LocalProgramCache:
    """Entries in ``root/programs/`` (see the module docstring); ``subdir`` names another
    folder under the same rules (the frontend's capture cache keeps its entries in
    ``root/captures/``)."""

    def __init__(self, root: Path, subdir: str = SUBDIR) -> None:
        self.root = root
        self.subdir = subdir

    @property
    def directory(self) -> Path:
        """``root/<subdir>``, checked private (created when missing).

        Raises:
            ember.runtime.compiled.private_cache.CacheDirError: not private to this user.
        """
        return cache_subdir(self.root, self.subdir)

    def path(self, key: str) -> Path:
        """The file of entry ``key``."""
        return self.directory / f"{key}{SUFFIX}"

    def read(self, key: str) -> bytes | None:
        """The bytes of entry ``key``; None when there is none.

        Raises:
            ValueError: the entry is a link or not a regular file, or belongs to another
                user (the caller warns and removes it).
        """
        path = self.path(key)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise ValueError(f"{path} is a symbolic link (to {os.readlink(path)})")
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a regular file")
        if st.st_uid != os.getuid():
            raise ValueError(f"{path} belongs to another user (uid {st.st_uid}, "
                             f"not {os.getuid()})")
        try:
            return read_file(path)
        except OSError as e:
            raise ValueError(f"{path} cannot be read ({e})") from None

    def write(self, key: str, data: bytes) -> None:
        """Store ``data`` as entry ``key`` atomically (mode 0600)."""
        write_atomic(self.path(key), data)

    def remove(self, key: str) -> None:
        """Remove entry ``key`` (a link is unlinked, never followed)."""
        remove_entry(self.path(key))

    def usage(self) -> LocalUsage:
        """How many entries, and their bytes."""
        directory = self.directory
        count = size = 0
        for path in directory.iterdir():
            if path.name.endswith(SUFFIX):
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    continue  # removed by another process since the listing
                count += 1
                size += st.st_size
        return LocalUsage(directory, count, size)

    def clear(self) -> int:
        """Remove every entry (and leftover temporary files of entries); return how many
        entries. Nothing else in the folder is touched: it removed every file and folder
        there (``EMBER_CACHE_DIR=$HOME`` emptied ``~/programs``)."""
        removed = 0
        for path in self.directory.iterdir():
            if not _is_entry_file(path.name):
                continue
            try:
                if stat.S_ISDIR(os.lstat(path).st_mode):
                    continue  # (a folder is never an entry)
            except FileNotFoundError:
                continue
            removed += path.name.endswith(SUFFIX)
            remove_entry(path)
        return removed


def _is_entry_file(name: str) -> bool:
    """An entry (``KEY.entry``) or a temporary file of one (``.KEY.entry.tmpXXXX``,
    :func:`write_atomic`)."""
    return name.endswith(SUFFIX) or (name.startswith(".") and f"{SUFFIX}.tmp" in name)
