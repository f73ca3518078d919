"""A method read from an outside object (``a.go(x)``) is guarded by its function's code:
replacing it on the instance (``a.go = f``) or on the class recompiles. Before, only
``type(a)`` was guarded and the old method's graph kept running (silently wrong).
Modules' methods are not guarded this way (a guard per layer and method call)."""

from __future__ import annotations

import torch
from strict_helpers import strict


class A:
    def go(self, t):
        return t + 1


OBJ = A()


def through_a_global(x):
    return OBJ.go(x)


def through_an_argument(x, obj):
    return obj.go(x)


def test_replaced_methods_recompile() -> None:
    compiled = strict(through_a_global)
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x), x + 1)
    OBJ.go = lambda t: t * 10  # type: ignore[method-assign]
    try:
        torch.testing.assert_close(compiled(x), x * 10)
    finally:
        del OBJ.go
    torch.testing.assert_close(compiled(x), x + 1)

    compiled = strict(through_an_argument)
    obj = A()
    torch.testing.assert_close(compiled(x, obj), x + 1)
    original = A.go
    A.go = lambda self, t: t - 1  # type: ignore[method-assign]
    try:
        torch.testing.assert_close(compiled(x, obj), x - 1)
    finally:
        A.go = original  # type: ignore[method-assign]
    assert compiled.stats.graph_breaks == 0
