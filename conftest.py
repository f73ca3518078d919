"""Test-session settings for every test under the repository.

The whole-program cache (``ember.runtime.cache``) is off in tests unless a test turns it
on (``config.patch(program_cache=True)``): tests patch stage internals and process
state (e.g. ``triton_for_cpu``) that the cache key cannot see, and a filled cache from
an earlier run would skip the stages they exercise. Subprocesses inherit the setting.
"""

import os

os.environ.setdefault("EMBER_PROGRAM_CACHE", "0")
