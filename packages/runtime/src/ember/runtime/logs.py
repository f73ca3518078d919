"""Topic logging, switched on by ``EMBER_LOGS`` (like ``TORCH_LOGS``).

``EMBER_LOGS=graphs,guards`` prints those topics to stderr; ``EMBER_LOGS=all`` prints
every topic. Each topic logs through the standard :mod:`logging` module under the logger
``ember.<topic>``, so applications can also route it with their own handlers::

    from ember.runtime.logs import log, log_enabled
    log("graph_breaks", f"graph break at {loc}: {reason}")
    if log_enabled("output_code"):          # guard expensive messages
        log("output_code", render(program))

Topics (:data:`TOPICS`):

``graphs``        captured and transformed graphs, printed as IR text
``guards``        the guards installed for each compiled frame
``graph_breaks``  where capture stopped, and why
``recompiles``    guard failures that caused a recompile, and the limit being hit
``dynamic``       which dimensions are symbolic and why, specialisations, shape guards
``fallbacks``     ops or frames that ran eagerly instead of compiled
``output_code``   generated wrapper and kernel source
``stages``        which stage ran, in what time, and boundary saves; the stage profile
                  (one table of phase timings a compile: :mod:`ember.runtime.phases`),
                  kernel-build pool sizes, kernels shared by dedupe
``cache``         compile-cache hits and misses
``cudagraphs``    CUDA graph recordings, and why a graph or call runs without one
``autotune``      max-autotune: each choice with its timings, cache hits, failed candidates
``patterns``      graph rewrites by pattern (attention to SDPA): rule, source line, or why not
``memory``        each compiled graph's memory plan: bytes allocated, freed and live per
                  step, the peak and the ideal (inductor's ``codegen/memory_plan.py``)
``partition``     the min-cut partitioner's choices: what is saved for the backward, what
                  is recomputed, the saved bytes
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from ember.runtime.config import LOG_TOPICS, config

TOPICS: tuple[str, ...] = LOG_TOPICS


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of the call (so that pytest's
    ``capsys`` and redirections see the output)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


_root = logging.getLogger("ember")
_handler = _CurrentStderr()
_handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))


def _check_topic(topic: str) -> None:
    if topic not in TOPICS:
        raise ValueError(f"unknown Ember log topic {topic!r}; topics: {', '.join(TOPICS)}")


def log_enabled(topic: str) -> bool:
    """Whether ``topic`` is switched on by ``EMBER_LOGS`` (or ``config.patch(logs=...)``).

    Raises:
        ValueError: for a topic not in :data:`TOPICS`.
    """
    _check_topic(topic)
    return "all" in config.logs or topic in config.logs


def log(topic: str, message: str | Callable[[], str]) -> None:
    """Log ``message`` under ``ember.<topic>``; printed to stderr when the topic is on.

    ``message`` may be a zero-argument callable, called only when the topic is on.

    Raises:
        ValueError: for a topic not in :data:`TOPICS`.
    """
    if not log_enabled(topic):
        return
    if _handler not in _root.handlers:
        _root.addHandler(_handler)
    logger = logging.getLogger(f"ember.{topic}")
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    text = message() if callable(message) else message
    logger.info(text)
