"""A generator left suspended inside ``try``/``finally`` (or ``with``) runs its cleanup
when Python closes it (at its last reference, the ``return`` of a loop over it). An
inlined generator is never closed: its ``finally`` never ran (silently missing side
effects). Such a capture now restarts with the generator made for real
(``segment._refuse_unclosed_generators``)."""

from __future__ import annotations

import gc

import torch
from strict_helpers import strict

LOG: list[str] = []


def _guarded(t):
    try:
        yield t
        yield t * 2
    finally:
        LOG.append("closed")


def _plain(t):
    for i in range(3):
        yield t * i


def first_of_loop(x):
    for v in _guarded(x):
        return v + 1


def one_next(x):
    it = _guarded(x)
    a = next(it)
    del it
    return a * 3


def exhausted(x):
    return sum(_guarded(x))


def plain_left_early(x):
    for v in _plain(x):
        return v + 1


def test_an_unclosed_generator_runs_its_finally_at_every_call() -> None:
    for fn in (first_of_loop, one_next):
        compiled = strict(fn)
        for call in range(3):
            LOG.clear()
            expected = fn(torch.ones(2))
            assert LOG == ["closed"]
            LOG.clear()
            torch.testing.assert_close(compiled(torch.ones(2)), expected)
            if call == 0:
                # NOTE: the compiling call leaves the real generator in a reference
                # cycle (a caught break's traceback): closed by the next collection
                gc.collect()
            assert LOG == ["closed"], fn.__name__
        assert "left suspended inside a try/with block" in compiled.breaks[0].reason


def test_generators_without_pending_cleanup_stay_in_the_graph() -> None:
    for fn in (exhausted, plain_left_early):
        compiled = strict(fn)
        LOG.clear()
        torch.testing.assert_close(compiled(torch.ones(2)), fn(torch.ones(2)))
        assert compiled.stats.graph_breaks == 0 and compiled.stats.graphs == 1
