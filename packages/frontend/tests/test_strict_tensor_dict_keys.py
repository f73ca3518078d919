"""A tensor argument used as a key of the caller's dict or set keyed by tensors
(``state[p]``, ``x in seen``, ``counts.get(x)``, a cache keyed by tensors): eager finds
entries by identity, so compiled code looks up that very tensor, guarded to be it. The
lookup was guarded by the key's metadata only (``d[b]`` returned ``d[a]``), and ``in``,
``dict.get`` and ``hash`` saw the fake tensor (never found)."""

from __future__ import annotations

import copy
from typing import Any

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
        return cache[x] + 1
    cache[x] = x * 10
    return cache[x]


def test_a_cache_keyed_by_tensors() -> None:
    a, b, c = torch.ones(2), torch.full((2,), 2.0), torch.full((2,), 3.0)
    cache = {a: torch.zeros(2), b: torch.full((2,), 5.0)}
    mirror = {a: torch.zeros(2), b: torch.full((2,), 5.0)}
    compiled = strict(_remember)
    for key in (a, b, c, a, c):
        expected = _remember(key, mirror)
        torch.testing.assert_close(compiled(key, cache), expected)
    assert len(cache) == 3 and torch.equal(cache[c], mirror[c])


def _membership(x: torch.Tensor, seen: set[torch.Tensor],
                counts: dict[torch.Tensor, int]) -> tuple[torch.Tensor, int]:
    counts[x] = counts.get(x, 0) + 1
    return x * (2 if x in seen else 3), hash(x) == id(x)


def test_in_get_and_hash_of_a_tensor_argument() -> None:
    a, b = torch.ones(2), torch.ones(2)
    seen = {a}
    counts: dict[torch.Tensor, int] = {}
    compiled = strict(_membership)
    for key in (a, a, b, a, b):
        got: Any = compiled(key, seen, counts)
        expected: Any = _membership(key, seen, copy.copy(counts))
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] is True
    assert counts[a] == 3 and counts[b] == 2
