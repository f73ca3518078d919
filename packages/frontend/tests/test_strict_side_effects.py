"""Strict mode: attribute writes on ordinary Python objects are side effects. Reads later
in the capture see the written value; the writes are replayed on the real object after
the graph runs, before a break instruction runs for real."""

from __future__ import annotations

import strict_context_var
import torch
from strict_helpers import strict
from torch import nn


class Box:
    def __init__(self) -> None:
        self.scale = 1.0
        self.flag = False
        self.seen: list[float] = []


BOX = Box()


# Inner's forward reads and writes strict_context_var.VAR, a global of another module
# reached without a source (as transformers' CompileableContextVar is).
class Inner(nn.Module):
    @strict_context_var.with_scale(2.0)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * strict_context_var.current_scale()


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) + 1


def read_after_write(x: torch.Tensor) -> torch.Tensor:
    BOX.scale = 3.0
    BOX.flag = True
    y = x * BOX.scale
    if BOX.flag:
        y = y + 1
    return y


def test_read_after_write_and_replay() -> None:
    compiled = strict(read_after_write)
    for _ in range(2):
        BOX.scale, BOX.flag = 1.0, False
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x), x * 3.0 + 1)
        # replayed on the real object after the graph ran
        assert BOX.scale == 3.0 and BOX.flag is True
    inner = getattr(compiled, "_compiled", compiled)
    assert inner.stats.graphs == 1 and inner.stats.graph_breaks == 0


def write_break_read(x: torch.Tensor) -> torch.Tensor:
    BOX.scale = 5.0
    y = x * BOX.scale
    print("break")  # the write is on the real object before this runs
    BOX.seen.append(BOX.scale)
    return y + BOX.scale


def test_write_then_break_then_read(capsys) -> None:
    compiled = strict(write_break_read)
    for _ in range(2):
        BOX.scale, BOX.seen = 1.0, []
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x), x * 5.0 + 5.0)
        assert BOX.scale == 5.0 and BOX.seen == [5.0]
    assert capsys.readouterr().out.count("break") == 2
    inner = getattr(compiled, "_compiled", compiled)
    assert inner.stats.graph_breaks == 1 and inner.stats.graphs == 2


def test_writes_on_an_unsourced_global_object() -> None:
    model = Outer()
    compiled = strict(model)
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), x * 2.0 + 1)
        # set then reset, replayed in order: the object ends as it started
        assert strict_context_var.VAR.value is None and strict_context_var.VAR.active is False
    inner = getattr(compiled, "_compiled", compiled)
    assert inner.stats.graphs == 1 and inner.stats.graph_breaks == 0


class Config:
    def __init__(self) -> None:
        self.steps = 0


def count_step(x: torch.Tensor, config: Config) -> torch.Tensor:
    config.steps = config.steps + 1
    return x * config.steps


def test_write_on_an_argument_object_is_replayed_and_guarded() -> None:
    compiled = strict(count_step)
    config = Config()
    for step in (1, 2, 3):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, config), x * step)
        assert config.steps == step
    # the value read (steps) is guarded: each new value recaptures
    inner = getattr(compiled, "_compiled", compiled)
    assert inner.stats.graph_breaks == 0 and inner.stats.compiles == 3


class Guarded:
    def __init__(self) -> None:
        self._limit = 1.0

    @property
    def limit(self) -> float:
        return self._limit

    @limit.setter
    def limit(self, value: float) -> None:
        self._limit = max(value, 0.0)


GUARDED = Guarded()


def write_through_property(x: torch.Tensor) -> torch.Tensor:
    GUARDED.limit = -4.0  # the setter clamps: inlined, its write replayed
    return x + GUARDED.limit


def test_write_through_a_property_runs_the_setter_inlined() -> None:
    compiled = strict(write_through_property)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x)  # clamped to 0.0, as in eager
    assert GUARDED.limit == 0.0
    inner = getattr(compiled, "_compiled", compiled)
    assert inner.stats.graph_breaks == 0
