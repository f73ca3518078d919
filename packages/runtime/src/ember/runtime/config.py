"""Ember's knobs: one typed object, read from the environment once.

Every setting that an environment variable can change lives here, so nothing else in
the runtime reads ``os.environ``. Other packages read the same object::

    from ember.runtime.config import config
    if config.serialize_boundaries: ...

Tests override settings for a block with :func:`patch`::

    with patch(recompile_limit=1, logs=frozenset({"recompiles"})):
        ...

Environment variables (read when this module is first imported; :func:`reload`
re-reads them):

================================  ========================================  ================
variable                          meaning                                   default
================================  ========================================  ================
``EMBER_LOGS``                    comma list of log topics, or ``all``;     (none)
                                  an unknown topic warns once, is ignored
``EMBER_SERIALIZE_BOUNDARIES``    save and re-load the program between      ``0``
                                  stages, verifying each dialect
``EMBER_CACHE_DIR``               the on-disk compile cache                 ``~/.cache/ember``
``EMBER_CACHE``                   ``0`` disables the compile cache          ``1``
                                  (kernels and whole programs)
``EMBER_PROGRAM_CACHE``           ``0`` disables the whole-program cache     ``1``
                                  only (kernels stay cached)
``EMBER_CAPTURE_CACHE``           ``0`` disables the frontend's capture      ``1``
                                  cache only (on with the program cache)
``EMBER_REMOTE_CACHE``            a shared program cache,                   (unset)
                                  ``redis://[:PASSWORD@]HOST[:PORT][/DB]``
``EMBER_REMOTE_CACHE_KEY``        the secret that signs remote entries       (unset)
                                  (HMAC-SHA256; required with the above;
                                  empty is no key: an error with it, a
                                  warning without it)
``EMBER_RECOMPILE_LIMIT``         compiled variants per code object (the    ``8``
                                  first compile counts; >= 1) before the
                                  frontend falls back to eager
``EMBER_DEBUG_DIR``               if set, the pipeline writes the program   (unset)
                                  after each stage there (``1_aot.ember``;
                                  later compiles ``1_aot-2.ember``, ...)
``EMBER_TRUST_ARTIFACTS``         ``1``: run compiled artifacts loaded      ``0``
                                  from files without ``trusted=True``
                                  (they are code: trust their source)
``EMBER_CUDAGRAPH_SHAPES``        input shapes a graph is recorded for      ``8``
                                  (``reduce-overhead``); later ones run
                                  plain (0: none is recorded)
``EMBER_CUDAGRAPH_COPY_OUTPUTS``  ``1``: a replay's outputs are copies      ``0``
                                  (kept across calls) instead of views a
                                  later replay revokes
                                  (``reduce-overhead``)
``EMBER_COMPILE_THREADS``         threads that build one program's kernels  ``0``
                                  (0: one a CPU, at most 32; 1: serial)
``EMBER_TRITON_WORKERS``          processes that compile Triton kernels     ``-1``
                                  for the build threads (-1: one a build
                                  thread, at most 16; 0: none)
``EMBER_TORCH_LAUNCHER``          ``1``: launch Triton binaries through     ``1``
                                  torch's C++ launcher where a binary
                                  allows it (``0``: Triton's own launcher)
================================  ========================================  ================

To add a knob: add a field to :class:`Config`, read it in :meth:`Config.from_env`, and
add a row to the table above; an integer one also goes into :data:`INT_SETTINGS`, which
bounds it in the environment and in :func:`patch` alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_DEFAULT_CACHE_DIR = "~/.cache/ember"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass
class Config:
    """Ember's settings. Read through the module-level :data:`config` object."""

    logs: frozenset[str] = frozenset()
    serialize_boundaries: bool = False
    cache_dir: Path = field(default_factory=lambda: Path(_DEFAULT_CACHE_DIR).expanduser())
    cache_enabled: bool = True
    program_cache: bool = True
    capture_cache: bool = True
    remote_cache: str | None = None
    remote_cache_key: str | None = field(default=None, repr=False)
    recompile_limit: int = 8
    debug_dir: Path | None = None
    trust_artifacts: bool = False
    cudagraph_shapes: int = 8
    cudagraph_copy_outputs: bool = False
    compile_threads: int = 0
    triton_workers: int = -1
    torch_launcher: bool = True

    @staticmethod
    def from_env(env: Mapping[str, str]) -> Config:
        """Build the settings from environment variables ``env``.

        Raises:
            ValueError: naming the variable whose value cannot be read (an unknown
                ``EMBER_LOGS`` topic only warns: :class:`UnknownLogTopicWarning`).
        """
        debug_dir = _directory(env, "EMBER_DEBUG_DIR")
        cache_dir = _directory(env, "EMBER_CACHE_DIR")
        return Config(
            logs=_parse_env_logs(env.get("EMBER_LOGS", "")),
            serialize_boundaries=_parse_bool(env, "EMBER_SERIALIZE_BOUNDARIES", False),
            cache_dir=(cache_dir or Path(_DEFAULT_CACHE_DIR)).expanduser(),
            cache_enabled=_parse_bool(env, "EMBER_CACHE", True),
            program_cache=_parse_bool(env, "EMBER_PROGRAM_CACHE", True),
            capture_cache=_parse_bool(env, "EMBER_CAPTURE_CACHE", True),
            remote_cache=env.get("EMBER_REMOTE_CACHE") or None,
            remote_cache_key=_remote_cache_key(env),
            recompile_limit=_parse_int(env, "recompile_limit", 8),
            debug_dir=debug_dir.expanduser() if debug_dir else None,
            trust_artifacts=_parse_bool(env, "EMBER_TRUST_ARTIFACTS", False),
            cudagraph_shapes=_parse_int(env, "cudagraph_shapes", 8),
            cudagraph_copy_outputs=_parse_bool(env, "EMBER_CUDAGRAPH_COPY_OUTPUTS", False),
            compile_threads=_parse_int(env, "compile_threads", 0),
            triton_workers=_parse_int(env, "triton_workers", -1),
            torch_launcher=_parse_bool(env, "EMBER_TORCH_LAUNCHER", True),
        )


LOG_TOPICS: tuple[str, ...] = (
    "graphs",
    "guards",
    "graph_breaks",
    "recompiles",
    "dynamic",
    "fallbacks",
    "output_code",
    "stages",
    "cache",
    "cudagraphs",
    "autotune",
    "patterns",
    "memory",
    "partition",
)
"""The ``EMBER_LOGS`` topics (described in :mod:`ember.runtime.logs`); ``all`` means
every one."""


class RemoteCacheKeyWarning(UserWarning):
    """``EMBER_REMOTE_CACHE_KEY`` is set but empty, and no remote cache would use it."""


def _remote_cache_key(env: Mapping[str, str]) -> str | None:
    """``EMBER_REMOTE_CACHE_KEY`` as given (None when unset). An empty one (or one of
    only whitespace) is kept as it is, so that the remote cache refuses it by name
    (:func:`ember.runtime.cache.signing.check_secret`) rather than as a missing key;
    without ``EMBER_REMOTE_CACHE`` it warns (:class:`RemoteCacheKeyWarning`): nothing
    uses it now, but a secret meant to be there is not (a key that is set, without a
    remote cache, is simply unused)."""
    key = env.get("EMBER_REMOTE_CACHE_KEY")
    if key is not None and not key.strip() and not env.get("EMBER_REMOTE_CACHE"):
        warnings.warn(
            "EMBER_REMOTE_CACHE_KEY is set but empty: an empty secret is no key. Nothing "
            "uses it now (EMBER_REMOTE_CACHE is not set); with a remote cache the first "
            "compile would raise SigningKeyError. Set it to a random secret of at least "
            "16 characters, or unset it", RemoteCacheKeyWarning, stacklevel=3)
    return key


class UnknownLogTopicWarning(UserWarning):
    """``EMBER_LOGS`` names a topic that does not exist; the known ones still log."""


_warned_logs: set[str] = set()


def parse_logs(text: str) -> frozenset[str]:
    """``"graphs, guards"`` -> ``frozenset({"graphs", "guards"})``; ``all`` is kept as is
    (see :func:`ember.runtime.logs.log_enabled`).

    Raises:
        ValueError: for a topic not in :data:`LOG_TOPICS`, listing them.
    """
    topics = _split_logs(text)
    unknown = _unknown_topics(topics)
    if unknown:
        raise ValueError(_unknown_topics_message(unknown, f"logs={text!r}"))
    return topics


def _parse_env_logs(text: str) -> frozenset[str]:
    """``EMBER_LOGS``: like :func:`parse_logs`, but an unknown topic is dropped with ONE
    :class:`UnknownLogTopicWarning` per value (an environment variable must not stop
    ``import ember``)."""
    topics = _split_logs(text)
    unknown = _unknown_topics(topics)
    if unknown and text not in _warned_logs:
        _warned_logs.add(text)
        warnings.warn(_unknown_topics_message(unknown, f"EMBER_LOGS={text!r}")
                      + "; they are ignored", UnknownLogTopicWarning, stacklevel=3)
    return topics - frozenset(unknown)


def _split_logs(text: str) -> frozenset[str]:
    return frozenset(t.strip() for t in text.split(",") if t.strip())


def _unknown_topics(topics: frozenset[str]) -> list[str]:
    return sorted(t for t in topics if t != "all" and t not in LOG_TOPICS)


def _unknown_topics_message(unknown: list[str], where: str) -> str:
    return (f"{where}: unknown Ember log topic{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))}; topics: {', '.join(LOG_TOPICS)} (or all)")


def _parse_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    if name not in env:
        return default
    value = env[name].strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name}={env[name]!r}: expected 0 or 1")


INT_SETTINGS: dict[str, tuple[str, int]] = {
    "recompile_limit": ("EMBER_RECOMPILE_LIMIT", 1),  # 0 would still compile once
    "cudagraph_shapes": ("EMBER_CUDAGRAPH_SHAPES", 0),  # 0: no graph recorded
    "compile_threads": ("EMBER_COMPILE_THREADS", 0),  # 0: one a CPU
    "triton_workers": ("EMBER_TRITON_WORKERS", -1),  # -1: one a build thread; 0: none
}
"""The integer settings: their variable and smallest value (smaller, or no integer, is a
``ValueError`` naming the variable, from the environment or :func:`patch`)."""


def _directory(env: Mapping[str, str], name: str) -> Path | None:
    """The directory variable ``name`` names (None when unset). An empty value is an
    error: taken as unset it silently meant the default (``cache clear`` with
    ``EMBER_CACHE_DIR=""`` emptied ``~/.cache/ember``)."""
    value = env.get(name)
    if value is None:
        return None
    if not value.strip():
        raise ValueError(f"{name}={value!r}: expected a directory (unset the variable "
                         "for the default)")
    return Path(value)


def _parse_int(env: Mapping[str, str], setting: str, default: int) -> int:
    name, minimum = INT_SETTINGS[setting]
    if not env.get(name, "").strip():
        return default
    try:
        value = int(env[name])
    except ValueError:
        raise ValueError(f"{name}={env[name]!r}: expected an integer") from None
    if value < minimum:
        raise ValueError(f"{name}={env[name]!r}: expected an integer >= {minimum}")
    return value


def _check_int_setting(setting: str, value: object) -> None:
    name, minimum = INT_SETTINGS[setting]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"setting {setting}={value!r} ({name}): expected an integer "
                         f">= {minimum}")


config: Config = Config.from_env(os.environ)
"""The process-wide settings. Import this object; never copy its fields at import time,
or :func:`patch` cannot reach them."""


def reload(env: Mapping[str, str] | None = None) -> None:
    """Re-read the settings from ``env`` (default ``os.environ``), in place."""
    fresh = Config.from_env(os.environ if env is None else env)
    for f in dataclasses.fields(Config):
        setattr(config, f.name, getattr(fresh, f.name))


@contextlib.contextmanager
def patch(**changes: Any) -> Iterator[Config]:
    """Override settings for the duration of a ``with`` block, then restore them.
    ``logs`` may be given as the ``EMBER_LOGS`` text (``"graphs,guards"``) or a set of
    topics.

    Raises:
        AttributeError: for a name that is not a setting.
        ValueError: ``logs`` names a topic that does not exist (listing the topics), or
            an integer setting is out of its range (:data:`INT_SETTINGS`).
    """
    names = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(changes) - names)
    if unknown:
        raise AttributeError(f"no Ember setting named {', '.join(unknown)}; "
                             f"settings: {', '.join(sorted(names))}")
    if "logs" in changes:
        logs = changes["logs"]
        if isinstance(logs, str):
            changes["logs"] = parse_logs(logs)
        else:
            changes["logs"] = parse_logs(",".join(logs))
    for name in INT_SETTINGS.keys() & changes.keys():
        _check_int_setting(name, changes[name])
    saved = {name: getattr(config, name) for name in changes}
    for name, value in changes.items():
        setattr(config, name, value)
    try:
        yield config
    finally:
        for name, value in saved.items():
            setattr(config, name, value)
