"""The capture cache's source table (``capture_cache_codec.writing_sources`` /
``reading_sources``): each distinct source of an entry is written once and every use
refers to its row, decoding gives back equal sources, and a table that refers forward,
to itself or out of range is an unreadable entry (``ValueError``), never a crash or a
cycle."""

from __future__ import annotations

import json

import pytest
from ember.frontend.bytecode.sources import AttrSource, ItemSource, LocalSource
from ember.frontend.capture_cache_codec import (
    decode_guard,
    decode_source,
    encode_guard,
    encode_source,
    reading_sources,
    writing_sources,
)
from ember.frontend.guard_model import Guard, Source


def _layer_weight(i: int, name: str) -> Source:
    layers = AttrSource(AttrSource(LocalSource("self"), "encoder"), "layer")
    return AttrSource(AttrSource(ItemSource(layers, i), name), "weight")


def _guards() -> list[Guard]:
    return [Guard(kind, _layer_weight(i, name), expected)
            for i in range(12) for name in ("query", "key", "value")
            for kind, expected in (("type", None), ("equals", 768))]


def test_each_distinct_source_is_one_row_and_decodes_to_an_equal_source() -> None:
    guards = _guards()
    with writing_sources() as table:
        encoded = [encode_guard(g) for g in guards]
    # self, self.encoder, .layer, 12 items, 36 attributes, 36 weights
    assert len(table.rows) == 3 + 12 + 36 + 36
    assert all(e[2][0] == "@" for e in encoded)
    inline = [encode_guard(g) for g in guards]
    assert len(json.dumps([encoded, table.rows])) * 2 < len(json.dumps(inline))
    with reading_sources(json.loads(json.dumps(table.rows))):
        decoded = [decode_guard(e, lambda s: None) for e in json.loads(json.dumps(encoded))]
    assert decoded == guards
    # one object per distinct source: decoding shares what the table shares
    assert decoded[0].source is decoded[1].source


def test_sources_equal_in_python_but_written_differently_keep_their_own_rows() -> None:
    base = LocalSource("d")
    sources = [ItemSource(base, 1), ItemSource(base, True), ItemSource(base, 1.0)]
    assert len(set(sources)) == 1  # 1 == True == 1.0: a dict keyed on sources merges them
    with writing_sources() as table:
        refs = [encode_source(s) for s in sources]
    assert len({json.dumps(r) for r in refs}) == 3
    with reading_sources(table.rows):
        keys = [decode_source(r).key for r in refs]  # type: ignore[attr-defined]
    assert [type(k) for k in keys] == [int, bool, float]


def test_outside_a_table_sources_are_written_inline() -> None:
    source = _layer_weight(3, "query")
    data = encode_source(source)
    assert data[0] == "AttrSource"
    assert decode_source(data) == source


@pytest.mark.parametrize("rows, ref", [
    ([["LocalSource", [["str", "x"]]]], ["@", 1]),                    # out of range
    ([["LocalSource", [["str", "x"]]]], ["@", -1]),                   # negative
    ([["LocalSource", [["str", "x"]]]], ["@", True]),                 # not an int
    ([["AttrSource", [["source", ["@", 0]], ["str", "a"]]]], ["@", 0]),  # itself
    ([["AttrSource", [["source", ["@", 1]], ["str", "a"]]],
      ["LocalSource", [["str", "x"]]]], ["@", 0]),                      # a later row
    ([["NoSuchSource", []]], ["@", 0]),                                  # no source class
], ids=["range", "negative", "bool", "itself", "forward", "class"])
def test_a_crafted_table_is_an_unreadable_entry(rows: list[object], ref: list[object]) -> None:
    with pytest.raises(ValueError, match="source"):
        with reading_sources(rows):
            decode_source(ref)


def test_a_reference_outside_reading_sources_is_refused() -> None:
    with pytest.raises(ValueError, match="names no earlier row"):
        decode_source(["@", 0])
    with pytest.raises(ValueError, match="not a list"):
        with reading_sources({"rows": []}):
            pass
