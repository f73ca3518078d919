"""Ember's whole-program compile cache (issue 17; ``docs/caching.md``).

A ``compile_program`` call whose program, tensors' metadata (and constant values),
backend, options, mode, stage versions, torch/Triton versions and device match an
earlier compile loads that compile's artifact instead of running aot and inductor:
locally from ``<EMBER_CACHE_DIR>/programs/``, or from a shared Redis server
(``EMBER_REMOTE_CACHE``, entries signed with ``EMBER_REMOTE_CACHE_KEY``).

==================  ===========================================================
module              concept
==================  ===========================================================
``key``             the key and its components
``entry``           an entry's bytes (the compiled ``.ember`` file without weights)
``local``           the private directory of entries
``redis_backend``   the Redis protocol and the remote store
``signing``         HMAC-SHA256 of remote entries
``program_cache``   lookup and store for the pipeline, stats
``cli``             ``python -m ember.runtime cache info|clear``
==================  ===========================================================
"""

from ember.runtime.cache.key import CacheKey, cache_key
from ember.runtime.cache.local import ProgramCacheWarning
from ember.runtime.cache.program_cache import CacheStats, CompileLookup, begin, enabled, stats
from ember.runtime.cache.redis_backend import RemoteCacheConfigError
from ember.runtime.cache.signing import SigningKeyError

__all__ = ["CacheKey", "CacheStats", "CompileLookup", "ProgramCacheWarning",
           "RemoteCacheConfigError", "SigningKeyError", "begin", "cache_key", "enabled",
           "stats"]
