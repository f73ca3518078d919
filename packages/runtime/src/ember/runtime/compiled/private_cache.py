"""The compile cache's directories are private to the user who runs Ember.

The cache holds code that Ember loads and runs (C++ shared libraries, Triton kernel
modules), so anyone who can write into it can run code as the user. Every directory of
the cache is therefore:

- created with mode 0700 (the root's parents are created normally);
- refused when it exists but is a symbolic link, is not a directory, belongs to another
  user, or is writable by group or others: :class:`CacheDirError` names the directory and
  ``EMBER_CACHE_DIR``, the variable that moves the cache.

Inside a private directory, a cache *entry* that is a symbolic link (or a file where a
directory belongs) is not followed: :func:`fresh_entry_dir` removes the link itself and
creates a real directory in its place. Files are read with ``O_NOFOLLOW``, and only
when they belong to the user (:func:`read_file`), and written to a temporary name that is removed on any failure
(:func:`write_atomic`).
"""

from __future__ import annotations

import atexit
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

CACHE_VARIABLE = "EMBER_CACHE_DIR"


class CacheDirError(RuntimeError):
    """A directory of the compile cache is not private to this user."""


def _refuse(path: Path, problem: str) -> CacheDirError:
    return CacheDirError(
        f"Ember's compile cache directory {path} {problem}; the cache holds code Ember "
        f"runs, so it must be a directory private to this user. Remove or fix it "
        f"(chmod 700), or set {CACHE_VARIABLE} to a private directory "
        f"(or EMBER_CACHE=0 to build in a temporary directory)")


def private_dir(path: Path, *, parents: bool = False) -> Path:
    """``path``, created with mode 0700 if missing, checked to be private if present.

    Args:
        path: the directory.
        parents: create missing parent directories (with the default mode) first.

    Returns:
        ``path``.

    Raises:
        CacheDirError: ``path`` is a symbolic link, not a directory, owned by another
            user, or writable by group or others.
    """
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass  # an existing directory: checked below, never changed
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, f"is a symbolic link (to {os.readlink(path)})")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "is not a directory")
    if st.st_uid != os.getuid():
        raise _refuse(path, f"belongs to another user (uid {st.st_uid}, not {os.getuid()})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _refuse(path, f"is writable by group or others "
                            f"(mode {stat.S_IMODE(st.st_mode):04o})")
    return path


def cache_subdir(root: Path, name: str) -> Path:
    """``root/name``, both private (see :func:`private_dir`); ``root`` is created with
    its parents when missing.

    Raises:
        CacheDirError: naming the directory that is not private.
    """
    private_dir(root, parents=True)
    return private_dir(root / name)


def remove_entry(path: Path) -> None:
    """Remove a cache entry without following links: a symbolic link or a file is
    unlinked (its target is untouched), a directory removed with its contents."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def fresh_entry_dir(path: Path) -> Path:
    """``path`` as a real directory of mode 0700: an existing directory is kept; a
    symbolic link or file there is removed first (never written through)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        remove_entry(path)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    return path


def read_file(path: Path) -> bytes:
    """The bytes of ``path``, refusing to follow a symbolic link or to read a file of
    another user (one put there by someone who could: the folders are private).

    Raises:
        OSError: the file is missing, unreadable, a symbolic link (``ELOOP``), or
            another user's (``PermissionError``).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        owner = os.fstat(fd).st_uid
        if owner != os.getuid():
            raise PermissionError(errno.EPERM, f"belongs to another user (uid {owner})",
                                  str(path))
        return f.read()


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file next to ``path`` and move it into place with
    ``os.replace`` (which replaces a symbolic link at ``path``, never its target). The
    temporary file is removed when anything fails."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def process_dir(prefix: str) -> Path:
    """A private temporary directory for this process (the cache disabled,
    ``EMBER_CACHE=0``), removed when the process exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))  # mode 0700
    atexit.register(shutil.rmtree, path, True)
    return path
