"""``next()`` of an inlined generator that returns ``v`` raises ``StopIteration(v)``, as
CPython does (before: a bare ``StopIteration``, so ``e.value`` was None)."""

from __future__ import annotations

import torch
from strict_helpers import check


def drain(x):
    def g():
        yield x
        return 5

    it = g()
    vals = []
    while True:
        try:
            vals.append(next(it))
        except StopIteration as e:
            vals.append(e.value)
            break
    try:
        next(it)
    except StopIteration as e:  # once finished: no value
        vals.append(e.value)
    return vals


def test_stop_iteration_carries_the_return_value() -> None:
    check(drain, torch.ones(2), graphs=0, breaks=0)
