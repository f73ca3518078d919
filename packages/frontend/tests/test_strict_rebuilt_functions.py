"""Functions the captured code makes and that are alive at a graph break are rebuilt
after the graph: with the globals of the module that made them (a function made inside
an inlined call into another module looks its globals up there, not in the compiled
function's module), and recognised by identity, never by an id another object reused."""

from __future__ import annotations

import sys
import textwrap
import types

import torch
from strict_helpers import check

SCALE = 100.0  # the compiled function's module: the wrong answer


def _other_module() -> types.ModuleType:
    module = types.ModuleType("ember_test_other_module")
    exec(textwrap.dedent("""
        SCALE = 3.0

        def make_scaler():
            return lambda t: t * SCALE
    """), module.__dict__)
    sys.modules[module.__name__] = module
    return module


OTHER = _other_module()


def made_elsewhere_used_after_a_break(x: torch.Tensor) -> torch.Tensor:
    scale = OTHER.make_scaler()   # a lambda made in the other module (inlined)
    s = x.sum().item()            # graph break: the lambda is rebuilt after it
    return scale(x) + s


def test_a_function_made_in_another_module_keeps_its_globals() -> None:
    x = torch.arange(4.0)
    compiled = check(made_elsewhere_used_after_a_break, x, graphs=2, breaks=1)
    assert torch.equal(compiled(x), x * 3.0 + 6.0)
