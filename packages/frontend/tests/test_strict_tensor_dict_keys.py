"""A tensor argument used as the key of a dict keyed by tensors (``state[p]``, a cache
keyed by tensors): the entry found is the one of that very tensor, so a call with
another tensor of the same shape and dtype never reuses the entry's value (the lookup
was guarded by the key tensor's metadata only: ``d[b]`` returned ``d[a]``)."""

from __future__ import annotations

import torch
from strict_helpers import strict


def _lookup(x: torch.Tensor, table: dict[torch.Tensor, int]) -> torch.Tensor:
    return x * table[x]


def test_the_entry_of_each_tensor() -> None:
    a, b = torch.ones(2), torch.ones(2)
    table = {a: 2, b: 3}
    compiled = strict(_lookup)
    for key, factor in ((a, 2), (b, 3), (a, 2), (b, 3)):
        torch.testing.assert_close(compiled(key, table), key * factor)
    assert compiled.stats.compiles == 2


def _remember(x: torch.Tensor, cache: dict[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    if x in cache:
        return cache[x]
    cache[x] = x * 10
    return cache[x]


def test_a_cache_keyed_by_tensors() -> None:
    a, b = torch.ones(2), torch.full((2,), 2.0)
    cache = {a: torch.zeros(2), b: torch.full((2,), 5.0)}
    compiled = strict(_remember)
    for key in (a, b, a):
        torch.testing.assert_close(compiled(key, cache), cache[key])
