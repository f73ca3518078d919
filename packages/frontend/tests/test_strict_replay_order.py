"""Start-state reads (``Fetch`` recipes) of the values a segment returns, leaves in the
frame at a break or writes back are read before the side-effect replays write into that
state (``recipes.prefetch``, ``Segment.execute``); the replays' targets are still
resolved in order. Before, the replays ran first: a returned object fetched through a
key the code had popped (HF Llama's ``kwargs.pop("past_key_values")`` with the cache in
the output) raised KeyError after the graph, and an item read before a ``pop`` was
fetched again after it (the wrong item, silently)."""

from __future__ import annotations

from typing import Any

import ember.frontend as ef
import torch


def test_an_object_fetched_through_a_popped_key_is_returned() -> None:
    def fn(x: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        cache = kwargs.pop("cache")
        cache.append(1)
        return x + 1, cache

    compiled = ef.compile(fn, backend="eager")
    for _ in range(2):
        cache: list[int] = []
        out, got = compiled(torch.ones(2), cache=cache)
        assert got is cache and cache == [1]
        torch.testing.assert_close(out, torch.full((2,), 2.0))


def test_an_item_read_before_a_pop_is_that_item() -> None:
    def fn(x: torch.Tensor, items: list[Any]) -> tuple[torch.Tensor, Any]:
        first = items[0]
        items.pop(0)
        return x * 2, first

    compiled = ef.compile(fn, backend="eager")
    a, b = object(), object()
    items = [a, b]
    _, got = compiled(torch.ones(2), items)
    assert got is a and items == [b]


def test_a_value_live_at_a_break_is_read_before_the_replays() -> None:
    def fn(x: torch.Tensor, d: dict[str, Any]) -> Any:
        kept = d.pop("k")
        print("break")  # the state at the break holds `kept`
        return x + 1, kept

    compiled = ef.compile(fn, backend="eager")
    marker = object()
    d = {"k": marker}
    _, got = compiled(torch.ones(2), d)
    assert got is marker and d == {}
    assert compiled.stats.graph_breaks == 1


def test_a_value_a_replay_writes_elsewhere_is_read_before_the_replays() -> None:
    def fn(x: torch.Tensor, items: list[Any], other: list[Any]) -> torch.Tensor:
        first = items[0]
        items.pop(0)
        other.append(first)
        return x + 1

    compiled = ef.compile(fn, backend="eager")
    a, b = object(), object()
    items, other = [a, b], []
    compiled(torch.ones(2), items, other)
    assert other == [a] and other[0] is a and items == [b]
