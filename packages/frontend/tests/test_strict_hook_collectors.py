"""transformers' output capturing, in short: a forward hook appends a submodule's output
to a dict reached through a ContextVar; a graph break follows. The hook's output and
its .detach() live across the break share memory: under automatic dynamic shapes the
later one stays static (dynamic.asked_when_aliased), not a RecordingError."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import ember.frontend as ef
import torch
from torch import nn

VAR: ContextVar[Any] = ContextVar("collector", default=None)


def _hook(mod: nn.Module, args: Any, out: torch.Tensor) -> None:
    collected = VAR.get()
    if collected is not None:
        collected["h"].append(out)


class _Collecting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.a.register_forward_hook(_hook)

    def forward(self, x: torch.Tensor) -> Any:
        collected: dict[str, list[torch.Tensor]] = {"h": []}
        token = VAR.set(collected)
        try:
            h = self.a(x).detach()
            h.requires_grad = True  # a graph break
            h = self.b(h)
        finally:
            VAR.reset(token)
        return h, tuple(collected["h"])


def test_hook_output_and_its_detached_view_across_a_break() -> None:
    m = _Collecting()
    compiled = ef.compile(m, backend="eager")
    for n in (2, 3, 3, 5):
        x = torch.randn(n, 4)
        (got, got_h), (want, want_h) = compiled(x), m(x)
        torch.testing.assert_close(got, want)
        assert len(got_h) == len(want_h) == 1
        torch.testing.assert_close(got_h[0], want_h[0])
