"""Calls of ``@functools.lru_cache`` / ``@functools.cache`` functions (a C wrapper: it
was a break, "a function Ember cannot look into") and of functions marked constant for
torch.compile (``_dynamo_marked_constant``, as ``assume_constant_result`` and
transformers' install probes set it). Found on HF Wav2Vec2: ``is_fsdp_managed_module``
calls ``is_torch_distributed_available`` (``@lru_cache`` over a marked probe) in every
encoder forward, 7 breaks and 4 graphs per call."""

from __future__ import annotations

import functools
import logging

import torch
from strict_helpers import check

_log = logging.getLogger(__name__)
PROBE_CALLS: list[int] = []


@functools.lru_cache
def scale_of(n: int) -> float:
    return n * 2.0


@functools.cache
def offsets(n: int) -> tuple[int, ...]:
    return tuple(range(n))


def t_cached(x):
    return x * scale_of(3) + len(offsets(4))


def test_lru_cache_function_is_interpreted():
    check(t_cached, torch.randn(3), graphs=1, breaks=0)


def _marked(fn):
    fn._dynamo_marked_constant = True  # what transformers' _make_compile_constant does
    return fn


@functools.lru_cache
@_marked
def feature_available() -> bool:
    PROBE_CALLS.append(1)
    _log.debug("probing")  # logging in the body: interpreted, it would break
    return True


def t_probe(x):
    if feature_available():
        return x + 1
    return x - 1


def test_marked_constant_under_lru_cache_runs_once_for_real():
    PROBE_CALLS.clear()
    feature_available.cache_clear()
    check(t_probe, torch.randn(3), graphs=1, breaks=0, calls=3)
    assert PROBE_CALLS == [1]  # the cache holds: eager's calls and the capture's share it
