"""A compiled function must not keep its callers' values alive: each cache entry's
guards held the capture (through the guard-origin callback), and with it every value
the first call read (its argument tensors, a suspended generator: its ``finally`` then
ran at the next call instead of at the return)."""

from __future__ import annotations

import gc
import weakref

import torch
from strict_helpers import strict


def test_arguments_are_freed_after_the_call() -> None:
    def f(x, y):
        return x * 2 + y

    def g(x, xs):
        z = x * 2
        print("break")
        return z + xs[0]

    for fn in (f, g):
        compiled = strict(fn)
        x, y = torch.ones(100), torch.ones(100)
        refs = weakref.ref(x), weakref.ref(y)
        compiled(x, y if fn is f else [y])
        del x, y
        gc.collect()
        assert all(r() is None for r in refs), fn.__name__
