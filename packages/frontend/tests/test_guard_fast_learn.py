"""When the guards' fast path is written: at the first passing call by default, at the
second for a capture-cache hit (``learn_after=2``: a process's first call is checked in
full, as a call that captured is)."""

from __future__ import annotations

from typing import Any

import torch
from ember.frontend.guards import compile_matcher
from strict_helpers import strict
from torch import nn


class Stack(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _guards_and_call() -> tuple[Any, Any, tuple[Any, Any]]:
    torch.manual_seed(0)
    compiled = strict(Stack(24))
    x = torch.randn(2, 4)
    compiled(x)
    (segment,) = compiled._compiled.segments[0]
    seen: list[tuple[Any, Any]] = []
    inner = segment.match

    def spy(state: Any, ctx: Any) -> Any:
        seen.append((state, ctx))
        return inner(state, ctx)

    segment.match = spy
    compiled(x)
    return segment.guards.guards, segment.input_sources, seen[0]


def test_the_fast_path_is_written_at_the_call_asked_for() -> None:
    guards, inputs, call = _guards_and_call()
    for learn_after in (1, 2):
        match = compile_matcher(guards, inputs, learn_after=learn_after)
        full_text = match.__ember_source__
        written = []
        for _ in range(3):
            assert match(*call) is not None
            written.append(match.__ember_source__ != full_text)
        assert written == [n >= learn_after for n in (1, 2, 3)], (learn_after, written)
        assert match.__ember_stamps__  # type: ignore[attr-defined]
