"""The whole-program cache as the pipeline uses it: look a compile up, store its result.

:func:`begin` computes the key of one ``compile_program`` call (:mod:`.key`) and returns a
:class:`CompileLookup`, or None when the cache is off for it (``EMBER_CACHE=0``,
``EMBER_PROGRAM_CACHE=0``, a backend without stages, ``EMBER_SERIALIZE_BOUNDARIES`` or
``EMBER_DEBUG_DIR``, which ask for the stages to run, or an option without a stable
text form; each said under ``EMBER_LOGS=cache``). :meth:`CompileLookup.load` checks the
local cache, then the remote one (a remote hit is stored locally); :meth:`~CompileLookup.store`
writes both. Anything wrong with an entry is a miss with a
:class:`~.local.ProgramCacheWarning`; the cache never makes a compile fail, except that a
cache directory not private to the user raises ``CacheDirError``, as the kernel cache does.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ember.runtime.cache.entry import EntryError, NeedsProgram, decode, encode
from ember.runtime.cache.key import CacheKey, KeyRequest, Uncacheable, cache_key
from ember.runtime.cache.local import LocalProgramCache, ProgramCacheWarning
from ember.runtime.cache.redis_backend import RedisAddress, RedisStore
from ember.runtime.cache.signing import check_secret
from ember.runtime.config import config
from ember.runtime.ir import IRFormatError, Program
from ember.runtime.logs import log
from ember.runtime.stages import Stage


@dataclass
class CacheStats:
    """What the program cache did in this process (:func:`stats`)."""

    local_hits: int = 0
    remote_hits: int = 0
    misses: int = 0
    stores: int = 0
    rejected: int = 0
    """Entries found but not used (corrupt, foreign, badly signed)."""
    remote_errors: int = 0


_stats = CacheStats()

_entry_of: dict[int, tuple[weakref.ref[Program], str]] = {}
"""id(captured program) -> (a weak reference to it, the digest of the entry this process
stored or loaded for it); programs compare by value, so they are no dict keys."""


def _remember(program: Program, digest: str) -> None:
    key = id(program)
    _entry_of[key] = (weakref.ref(program, lambda _: _entry_of.pop(key, None)), digest)


def stats() -> CacheStats:
    """This process's counters (the object itself: it keeps counting)."""
    return _stats


class RemoteProgramCache:
    """The remote backend with its signing secret; switched off for the process after
    its first network error (one warning)."""

    def __init__(self, url: str, secret: str | None) -> None:
        self.secret = check_secret(secret)
        self.store = RedisStore(RedisAddress.parse(url))
        self.failed = False

    def _failure(self, what: str, error: OSError) -> None:
        self.failed = True
        _stats.remote_errors += 1
        self.store.close()
        message = (f"Ember's remote program cache {self.store.address.describe()} failed "
                   f"to {what} ({type(error).__name__}: {error}); it is off for the rest "
                   "of this process and programs are compiled")
        log("cache", message)
        warnings.warn(message, ProgramCacheWarning, stacklevel=4)

    def get(self, key: str) -> bytes | None:
        """Entry ``key``'s bytes; None when absent or the server failed."""
        if self.failed:
            return None
        try:
            return self.store.get(key)
        except OSError as e:
            self._failure("answer a lookup", e)
            return None

    def put(self, key: str, data: bytes) -> None:
        """Store entry ``key`` (a failure warns once and switches the remote off)."""
        if self.failed:
            return
        try:
            self.store.set(key, data)
        except OSError as e:
            self._failure("store an entry", e)


_remotes: dict[tuple[str, str | None], RemoteProgramCache] = {}


def remote_cache() -> RemoteProgramCache | None:
    """The configured remote cache (one per URL and secret in a process), or None.

    Raises:
        ember.runtime.cache.signing.SigningKeyError: a remote cache without
            ``EMBER_REMOTE_CACHE_KEY`` (or with a short one).
        ember.runtime.cache.redis_backend.RemoteCacheConfigError: an unreadable URL.
    """
    url = config.remote_cache
    if url is None:
        return None
    found = _remotes.get((url, config.remote_cache_key))
    if found is None:
        found = RemoteProgramCache(url, config.remote_cache_key)
        _remotes[(url, config.remote_cache_key)] = found
    return found


def close_remotes() -> None:
    """Close and forget every remote cache of this process (the next compile connects
    again)."""
    for remote in _remotes.values():
        remote.store.close()
    _remotes.clear()


def local_cache() -> LocalProgramCache:
    """The local cache under ``EMBER_CACHE_DIR``."""
    return LocalProgramCache(config.cache_dir)


def enabled() -> bool:
    """Whether the program cache is on (``EMBER_CACHE`` and ``EMBER_PROGRAM_CACHE``)."""
    return config.cache_enabled and config.program_cache


class CompileLookup:
    """One compile's key and what to do with it."""

    def __init__(self, key: CacheKey, program: Program, local: LocalProgramCache,
                 remote: RemoteProgramCache | None) -> None:
        self.key = key
        self.program = program
        self.local = local
        self.remote = remote

    def _reject(self, where: str, problem: str) -> None:
        _stats.rejected += 1
        message = (f"Ember's {where} program cache entry {self.key.short} is not used "
                   f"({problem}); compiling the program instead")
        log("cache", message)
        warnings.warn(message, ProgramCacheWarning, stacklevel=4)

    def load(self) -> Program | None:
        """The compiled program from the local or the remote cache, or None (a miss)."""
        key = self.key.digest
        try:
            data = self.local.read(key)
            if data is not None:
                compiled = decode(data, key, self.program)
                _stats.local_hits += 1
                _remember(self.program, key)
                log("cache", f"program cache hit (local) {self.key.short}")
                return compiled
        except (ValueError, EntryError) as e:
            self._reject("local", str(e))
            self.local.remove(key)
        if self.remote is not None:
            data = self.remote.get(key)
            if data is not None:
                try:
                    compiled = decode(data, key, self.program, self.remote.secret)
                except EntryError as e:
                    self._reject("remote", str(e))
                else:
                    _stats.remote_hits += 1
                    log("cache", f"program cache hit (remote) {self.key.short}")
                    if self._write_local(data):
                        _remember(self.program, key)
                    return compiled
        _stats.misses += 1
        log("cache", lambda: f"program cache miss {self.key.short} ("
            + " ".join(f"{n}={d[:8]}" for n, d in self.key.components.items()) + ")")
        return None

    def discard(self, problem: str) -> None:
        """A hit that could not be run (``problem``): remove the local entry, warn."""
        self._reject("local", problem)
        self.local.remove(self.key.digest)

    def not_stored(self, reason: str) -> None:
        """Say under ``cache`` that this compile is not stored, and why."""
        log("cache", f"program cache: {self.key.short} not stored: {reason}")

    def store(self, compiled: Program) -> None:
        """Store ``compiled`` locally and, when configured, remotely (signed)."""
        secret = self.remote.secret if self.remote is not None else None
        try:
            data = encode(self.key.digest, compiled, self.program, secret)
        except IRFormatError as e:
            self.not_stored(f"the compiled program cannot be saved ({e})")
            return
        if self._write_local(data):
            _remember(self.program, self.key.digest)
        if self.remote is not None:
            self.remote.put(self.key.digest, data)
        _stats.stores += 1
        log("cache", f"program cache store {self.key.short} ({len(data)} bytes"
                     f"{', local and remote' if self.remote is not None else ''})")

    def _write_local(self, data: bytes) -> bool:
        try:
            self.local.write(self.key.digest, data)
        except OSError as e:
            message = f"Ember could not write program cache entry {self.key.short} ({e})"
            log("cache", message)
            warnings.warn(message, ProgramCacheWarning, stacklevel=4)
            return False
        return True


def entry_digest(program: Program) -> str | None:
    """The key digest of the local entry this process stored or loaded for ``program``
    (the very object a ``compile_program`` call was given), or None: what the
    frontend's capture cache records to load the compiled program without capturing."""
    found = _entry_of.get(id(program))
    if found is None or found[0]() is not program:
        return None
    return found[1]


def load_entry(digest: str) -> Program | None:
    """The compiled program of local entry ``digest``, loaded without its captured
    program (for the frontend's capture cache), or None when the entry is missing or
    left tensors out (kept: a compile with its program can use it). An entry that is
    corrupt, foreign or for another key is a miss with a
    :class:`~.local.ProgramCacheWarning` and is removed.

    Raises:
        ember.runtime.compiled.private_cache.CacheDirError: the cache directory is not
            private to this user.
    """
    local = local_cache()
    try:
        data = local.read(digest)
        if data is None:
            return None
        compiled = decode(data, digest, None)
    except NeedsProgram as e:
        log("cache", f"program cache entry {digest[:16]} not loaded by the capture cache: {e}")
        return None
    except (ValueError, EntryError) as e:
        _stats.rejected += 1
        message = (f"Ember's local program cache entry {digest[:16]} is not used ({e}); "
                   "capturing and compiling the program instead")
        log("cache", message)
        warnings.warn(message, ProgramCacheWarning, stacklevel=3)
        local.remove(digest)
        return None
    _stats.local_hits += 1
    log("cache", f"program cache hit (local, by the capture cache) {digest[:16]}")
    return compiled


def begin(program: Program, backend: str, stages: Sequence[Stage],
          options: Mapping[str, Any], mode: str | None) -> CompileLookup | None:
    """The lookup for one ``compile_program`` call, or None when the cache is off for it
    (the reason under ``EMBER_LOGS=cache``).

    Raises:
        ember.runtime.cache.signing.SigningKeyError: ``EMBER_REMOTE_CACHE`` without a
            usable ``EMBER_REMOTE_CACHE_KEY``.
        ember.runtime.cache.redis_backend.RemoteCacheConfigError: a bad
            ``EMBER_REMOTE_CACHE``.
    """
    if not enabled():
        return None
    reason = None
    if not stages:
        reason = f"backend {backend!r} runs no stage"
    elif config.serialize_boundaries or config.debug_dir is not None:
        reason = "EMBER_SERIALIZE_BOUNDARIES or EMBER_DEBUG_DIR asks for the stages to run"
    if reason is not None:
        log("cache", f"program cache not used: {reason}")
        return None
    remote = remote_cache()
    try:
        key = cache_key(KeyRequest(program, backend, tuple(stages), options, mode))
    except Uncacheable as e:
        log("cache", f"program cache not used: {e}")
        return None
    return CompileLookup(key, program, local_cache(), remote)
