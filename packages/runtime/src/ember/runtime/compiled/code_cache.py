"""The code objects of generated wrappers, kept on disk as Python keeps ``.pyc`` files.

A compiled graph's wrapper is Python source (140 KB for the forward graph of a 12-layer
BERT training program); Python's ``compile()`` of it took ~33 ms of every warm start,
and as much again at the first backward. :func:`wrapper_code` compiles a wrapper once
per machine and then reads its code object back with :mod:`marshal` (~1 ms)::

    <cache root>/wrapper-code/<key>.code

``key`` hashes the source, the name it is compiled under (the code object carries it:
tracebacks show it, with the source's own line numbers, exactly as for a fresh
compile), the interpreter's bytecode and marshal versions
(:data:`importlib.util.MAGIC_NUMBER`, :data:`marshal.version`) and its optimization level
(``-O`` drops asserts). An entry is one file: a magic line, a JSON header line (the key
and the SHA-256 of the rest), then the marshalled code object. It is written to a
temporary name and renamed into place (:func:`.private_cache.write_atomic`) and read
without following links (:func:`.private_cache.read_file`), in a private directory
(:mod:`.private_cache`), like the kernels' caches: whoever can write there can already
replace the kernels Ember runs, so :mod:`marshal`'s trust in its input adds no exposure.

An entry that is a symbolic link, truncated, or does not match its digest or key is a
miss with a :class:`CodeCacheWarning` and is removed. Any other failure (the directory,
a write) is logged under ``cache`` and the source is compiled as before: the cache is a
shortcut, never the only path. With the compile cache off (``EMBER_CACHE=0``) nothing
is read or written. Counts (the compile profile, :mod:`ember.runtime.phases`):
``wrapper code cache hits`` and ``wrapper code compiles``.

A capture's guard check (``ember.frontend.guard_writer``: one generated function over
every guard, 1,400 of them for a 12-layer BERT, ~0.1 s to compile) goes through the
same cache (:func:`cached_code`, kind ``guard``): a warm start rebuilds it from its
capture-cache entry. Its text holds only names the writer makes up and integers; every
captured value is a constant of its namespace, so equal guards give equal text.
"""

from __future__ import annotations

import __future__

import errno
import hashlib
import importlib.util
import json
import marshal
import sys
import warnings
from pathlib import Path
from types import CodeType

from ember.runtime.compiled.private_cache import (
    cache_subdir,
    read_file,
    remove_entry,
    write_atomic,
)
from ember.runtime.config import config
from ember.runtime.logs import log
from ember.runtime.phases import count

#: the layout of an entry; a change of layout changes every key
FORMAT = 1
SUBDIR = "wrapper-code"
SUFFIX = ".code"
MAGIC = b"ember-wrapper-code\n"
_MAX_HEADER = 4096
# Wrappers are compiled with the ``annotations`` future feature on, as they were when
# the loader (which imports it) compiled them, whatever module calls this one.
_FLAGS = __future__.annotations.compiler_flag


class CodeCacheWarning(UserWarning):
    """An entry of the wrapper code cache was corrupt and has been removed."""


class _CorruptEntry(Exception):
    """An entry that exists but cannot be used (named by the message)."""


def compile_source(source: str, filename: str) -> CodeType:
    """``compile(source, filename, "exec")`` with the wrappers' flags (no cache)."""
    code: CodeType = compile(source, filename, "exec", flags=_FLAGS, dont_inherit=True)
    return code


def entry_key(source: str, filename: str) -> str:
    """The cache key of ``source`` compiled as ``filename`` by this interpreter."""
    h = hashlib.sha256()
    for part in (f"format {FORMAT}".encode(), importlib.util.MAGIC_NUMBER,
                 f"marshal {marshal.version} optimize {sys.flags.optimize}".encode(),
                 filename.encode("utf-8", "surrogatepass"),
                 source.encode("utf-8", "surrogatepass")):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def cache_dir() -> Path:
    """``<config.cache_dir>/wrapper-code``, private (:func:`.private_cache.cache_subdir`).

    Raises:
        ember.runtime.compiled.private_cache.CacheDirError: a directory is not private.
    """
    return cache_subdir(Path(config.cache_dir), SUBDIR)


def encode(key: str, code: CodeType) -> bytes:
    """An entry's bytes: the magic line, the header line, the marshalled ``code``."""
    payload = marshal.dumps(code)
    header = {"format": FORMAT, "key": key, "sha256": hashlib.sha256(payload).hexdigest()}
    return MAGIC + json.dumps(header, sort_keys=True).encode("ascii") + b"\n" + payload


def decode(data: bytes, key: str, filename: str) -> CodeType:
    """The code object of an entry's bytes, checked against ``key`` and ``filename``.

    Raises:
        _CorruptEntry: naming what is wrong.
    """
    if not data.startswith(MAGIC):
        raise _CorruptEntry("no magic line")
    end = data.find(b"\n", len(MAGIC), len(MAGIC) + _MAX_HEADER)
    if end < 0:
        raise _CorruptEntry("the header line is missing or too long")
    try:
        header = json.loads(data[len(MAGIC):end].decode("ascii"))
    except ValueError as e:  # UnicodeDecodeError is one
        raise _CorruptEntry(f"unreadable header ({e})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise _CorruptEntry("unknown entry format")
    if header.get("key") != key:
        raise _CorruptEntry("stored for another key")
    payload = data[end + 1:]
    if header.get("sha256") != hashlib.sha256(payload).hexdigest():
        raise _CorruptEntry("the code does not match its SHA-256 (truncated or changed)")
    try:
        code = marshal.loads(payload)
    except (EOFError, ValueError, TypeError) as e:
        raise _CorruptEntry(f"unreadable code ({e})") from None
    if not isinstance(code, CodeType) or code.co_filename != filename:
        raise _CorruptEntry("not the code object of this wrapper")
    return code


def _read(path: Path, key: str, filename: str) -> CodeType | None:
    """The code object of the entry at ``path``; None when there is none.

    Raises:
        _CorruptEntry: the entry is a link, unreadable, or fails :func:`decode`.
    """
    try:
        data = read_file(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _CorruptEntry("a symbolic link") from None
        raise _CorruptEntry(f"unreadable ({type(e).__name__}: {e})") from None
    return decode(data, key, filename)


def wrapper_code(source: str, filename: str) -> CodeType:
    """The code object of wrapper ``source`` compiled as ``filename`` (``exec`` mode):
    :func:`cached_code` of kind ``wrapper``.

    Raises:
        SyntaxError: the source does not compile (as ``compile()`` does).
    """
    return cached_code(source, filename, "wrapper")


def cached_code(source: str, filename: str, kind: str) -> CodeType:
    """The code object of generated ``source`` compiled as ``filename`` (``exec`` mode):
    from the cache when there, else compiled (and stored). ``kind`` names the source in
    logs, warnings and counts (``wrapper``; ``guard``: a capture's guard check, which
    a warm start builds from its capture-cache entry). Never fails for the cache's
    sake; a corrupt entry warns (:class:`CodeCacheWarning`) and is removed.

    Raises:
        SyntaxError: the source does not compile (as ``compile()`` does).
    """
    if not config.cache_enabled:
        return compile_source(source, filename)
    key = entry_key(source, filename)
    path: Path | None = None
    try:
        path = cache_dir() / f"{key}{SUFFIX}"
        code = _read(path, key, filename)
    except _CorruptEntry as e:
        assert path is not None
        warnings.warn(f"Ember: corrupt {kind} code cache entry {path} ({e}); removed, "
                      f"the {kind} is compiled again", CodeCacheWarning, stacklevel=3)
        _remove(path, kind)
        code = None
    except Exception as e:  # noqa: BLE001 - the cache is a shortcut: compile() works
        log("cache", f"{kind} code cache not used for {filename} ({type(e).__name__}: {e})")
        return _compiled(source, filename, kind)
    if code is not None:
        log("cache", f"{kind} code cache hit {key[:16]} ({filename})")
        count(f"{kind} code cache hits")
        return code
    log("cache", f"{kind} code cache miss {key[:16]} ({filename})")
    code = _compiled(source, filename, kind)
    try:
        write_atomic(path, encode(key, code))
    except Exception as e:  # noqa: BLE001 - the next load compiles again
        log("cache", f"{kind} code not stored for {filename} ({type(e).__name__}: {e})")
    return code


def _compiled(source: str, filename: str, kind: str) -> CodeType:
    count(f"{kind} code compiles")
    return compile_source(source, filename)


def _remove(path: Path, kind: str) -> None:
    try:
        remove_entry(path)
    except OSError as e:
        log("cache", f"corrupt {kind} code cache entry {path} not removed ({e})")


__all__ = ["FORMAT", "CodeCacheWarning", "cache_dir", "cached_code", "compile_source", "decode",
           "encode", "entry_key", "wrapper_code"]
