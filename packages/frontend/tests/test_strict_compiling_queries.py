"""Libraries ask whether they are being compiled (to take compile-friendly paths): inside
a strict capture the answer is yes, as under torch.compile, also for
``torch._dynamo.is_compiling`` (older libraries' fallback; before: False, so such a
library took its eager-only path inside the graph)."""

from __future__ import annotations

import torch
from strict_helpers import strict


def test_compiling_queries_say_yes() -> None:
    def f(x):
        return x + 1, torch.compiler.is_compiling(), torch._dynamo.is_compiling()

    compiled = strict(f)
    assert f(torch.ones(1))[1:] == (False, False)
    assert compiled(torch.ones(1))[1:] == (True, True)
    assert compiled.stats.graph_breaks == 0
