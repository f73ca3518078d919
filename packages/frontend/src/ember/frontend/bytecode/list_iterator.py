"""The iterator strict capture pushes for a value of known length: an index into a list
of items, which a graph break can rebuild (:mod:`.iteration` makes them)."""

from __future__ import annotations

from typing import Any

__all__ = ["ListIterator"]


class ListIterator:
    """An iterator over a fixed list of items (what ``GET_ITER`` pushes).

    Its fields have names no mapping protocol probes (``items``/``keys`` would make
    ``OrderedDict.update(iterator)`` take it for a mapping)."""

    def __init__(self, items: list[Any], index: int = 0) -> None:
        self.item_list = items
        self.position = index

    def exhausted(self) -> bool:
        return self.position >= len(self.item_list)

    def next(self) -> Any:
        item = self.item_list[self.position]
        self.position += 1
        return item

    def remaining(self) -> list[Any]:
        rest = self.item_list[self.position:]
        self.position = len(self.item_list)
        return rest

    def __iter__(self) -> ListIterator:
        return self

    def __next__(self) -> Any:
        if self.exhausted():
            raise StopIteration
        return self.next()
