"""A method read from an outside object (``a.go(x)``) is guarded by its function's code:
replacing it on the instance (``a.go = f``) or on the class recompiles. Before, only
``type(a)`` was guarded and the old method's graph kept running (silently wrong).
A module's methods are guarded by the function's identity (``MethodFuncSource``, which
the guard fast path's stamp covers, so a model's layers pay no guard per method call):
``m.helper = MethodType(f, m)``, ``m.forward = g`` on a submodule or a module called
inside the compiled function, or ``Cls.helper = f`` recompile. Before, they were not
guarded at all and the old graph kept running."""

from __future__ import annotations

import types

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


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def helper(self, y):
        return y + 1

    def forward(self, x):
        return self.helper(self.lin(x))


_HELPER = Scaled.helper


def test_replaced_module_methods_recompile() -> None:
    torch.manual_seed(0)
    model = Scaled()
    x = torch.randn(2, 3)

    def call_it(x):
        return model(x)

    for compiled in (strict(model), strict(call_it)):
        model.__dict__.pop("helper", None)
        model.lin.__dict__.pop("forward", None)
        model.__dict__.pop("forward", None)
        compiled(x)
        compiled(x)
        model.helper = types.MethodType(lambda self, y: y * 100, model)
        torch.testing.assert_close(compiled(x), model(x))
        model.lin.forward = lambda t: t - 5  # a submodule's forward on the instance
        torch.testing.assert_close(compiled(x), model(x))
        del model.helper
        try:
            Scaled.helper = lambda self, y: y * 3  # type: ignore[method-assign]
            torch.testing.assert_close(compiled(x), model(x))
        finally:
            Scaled.helper = _HELPER  # type: ignore[method-assign]
        torch.testing.assert_close(compiled(x), model(x))
        assert compiled.stats.recompiles >= 3, compiled.stats
    compiled = strict(call_it)
    compiled(x)
    model.forward = lambda t: t * 0  # the module called inside the function
    torch.testing.assert_close(compiled(x), torch.zeros(2, 3))
