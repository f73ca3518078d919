"""``python -m ember.runtime cache info|clear``: look at and empty the program cache.

``info`` prints where the local cache is, whether it is on, how many entries it holds
and their bytes, how many Triton binaries the kernel cache keeps for launches without
Triton's compiler (``ember.runtime.compiled.triton_stored``), and the remote cache (its address, without a password) if one is
configured, and the frontend's capture entries (``captures/``). ``clear`` removes every
local entry, captures too; ``clear --remote`` also deletes every
Ember entry on the remote server. The kernel caches (``cpp/``, ``triton/``) are left
alone. This process's hit and miss counts are :func:`ember.runtime.cache.stats` (a
fresh command-line process has none).
"""

from __future__ import annotations

import argparse

from ember.runtime.cache.local import LocalProgramCache
from ember.runtime.cache.program_cache import enabled
from ember.runtime.cache.redis_backend import RedisAddress, RedisStore
from ember.runtime.cache.signing import SigningKeyError, check_secret
from ember.runtime.compiled.triton_stored import stored_binaries
from ember.runtime.config import config


#: the folder of ember-frontend's capture cache, under the same rules
#: (:class:`LocalProgramCache` with ``subdir``)
CAPTURES = "captures"


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``cache info`` and ``cache clear`` to a subcommand parser."""
    cache = commands.add_parser("cache", help="the whole-program compile cache: info, clear")
    actions = cache.add_subparsers(required=True, metavar="ACTION")
    info = actions.add_parser("info", help="where the cache is, its entries and bytes")
    info.set_defaults(command=_info)
    clear = actions.add_parser("clear", help="remove every local entry")
    clear.add_argument("--remote", action="store_true",
                       help="also delete every Ember entry on the remote cache server")
    clear.set_defaults(command=_clear)


def _info(args: argparse.Namespace) -> int:
    local = LocalProgramCache(config.cache_dir)
    usage = local.usage()
    state = "on" if enabled() else "off (EMBER_CACHE=0 or EMBER_PROGRAM_CACHE=0)"
    print(f"program cache: {state}")
    print(f"local: {usage.directory}")
    print(f"entries: {usage.entries}")
    print(f"bytes: {usage.bytes}")
    captures = LocalProgramCache(config.cache_dir, CAPTURES).usage()
    print(f"capture entries (ember-frontend): {captures.entries} ({captures.bytes} bytes)")
    print(f"stored Triton binaries: {stored_binaries(config.cache_dir)}")
    if config.remote_cache is None:
        unused = ("; EMBER_REMOTE_CACHE_KEY is unused" if config.remote_cache_key is not None
                  else "")
        print(f"remote: none (EMBER_REMOTE_CACHE unset{unused})")
    else:
        address = RedisAddress.parse(config.remote_cache)
        try:
            check_secret(config.remote_cache_key)
            signed = "signed"
        except SigningKeyError as e:
            signed = f"refused: {e}"
        print(f"remote: {address.describe()} ({signed})")
    return 0


def _clear(args: argparse.Namespace) -> int:
    removed = LocalProgramCache(config.cache_dir).clear()
    print(f"removed {removed} local entries from {config.cache_dir / 'programs'}")
    # (a capture entry names a program entry: without it, it is a miss anyway)
    captures = LocalProgramCache(config.cache_dir, CAPTURES).clear()
    print(f"removed {captures} capture entries from {config.cache_dir / CAPTURES}")
    if args.remote:
        if config.remote_cache is None:
            raise ValueError("cache clear --remote: EMBER_REMOTE_CACHE is not set")
        store = RedisStore(RedisAddress.parse(config.remote_cache))
        try:
            count = store.clear()
        finally:
            store.close()
        print(f"removed {count} remote entries from "
              f"{RedisAddress.parse(config.remote_cache).describe()}")
    return 0
