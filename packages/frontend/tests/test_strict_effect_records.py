"""Side effects recorded during strict capture are named, immutable records
(:mod:`ember.frontend.bytecode.side_effects`), replayed by frozen ``Replay`` entries."""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import pytest
import torch
from ember.frontend.bytecode.capture import CaptureContext
from ember.frontend.bytecode.recipes import Const, Replay
from ember.frontend.bytecode.side_effects import AttrWrite, CellWrite, GlobalWrite
from strict_helpers import strict

COUNT = 0


class Box:
    scale: int
    a: int


def writes_everything(x: torch.Tensor, box: Box) -> Any:
    global COUNT
    COUNT = COUNT + 1
    box.scale = 3
    return x * box.scale


def test_attribute_and_global_writes_are_records() -> None:
    box = Box()
    compiled = strict(writes_everything)
    torch.testing.assert_close(compiled(torch.ones(2), box), torch.full((2,), 3.0))
    assert box.scale == 3 and COUNT >= 1
    (segment,) = compiled.segments[0]
    assert sorted(r.kind for r in segment.replays) == ["attr", "global"]
    attr = next(r for r in segment.replays if r.kind == "attr")
    assert attr.name == "scale" and attr.raw is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        attr.name = "other"


def test_capture_records_are_named_tuples() -> None:
    cap = CaptureContext()
    box = Box()
    cap.record_attr_write(box, "a", 1, raw=True)
    assert cap.attr_writes[(id(box), "a")] == AttrWrite(box, "a", 1, raw=True)
    # code run for real wrote into box.__dict__: recorded, the raw flag kept
    before = dict(box.__dict__)
    box.a = 2
    cap.capture_writes(box, before)
    write = cap.attr_writes[(id(box), "a")]
    assert (write.value, write.raw) == (2, True) and "a" not in box.__dict__
    cap.forget_attr_write(box, "a")
    assert cap.attr_writes == {}
    assert GlobalWrite({}, "n", 1).name == "n"
    cell = types.CellType(0)
    assert CellWrite(cell, 1) == (cell, 1)


def test_unknown_replay_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown replay kind 'setitem'"):
        Replay("setitem", Const(None), None)


def test_cell_writes_are_records() -> None:
    total = 0

    def add(x: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total = total + 1
        return x + total

    compiled = strict(add)
    torch.testing.assert_close(compiled(torch.zeros(2)), torch.ones(2))
    assert total == 1
    (segment,) = compiled.segments[0]
    assert [r.kind for r in segment.replays] == ["cell"]
