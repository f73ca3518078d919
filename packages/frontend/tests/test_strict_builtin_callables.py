"""``ember.frontend.compile`` of a callable that is not a Python function (a builtin such
as ``torch.sin``, an object with ``__call__``) in the default strict capture: it is called
from a one-line Python function (``bytecode/wrapped_callables.py``). It raised
"strict capture needs a Python function or module" where torch.compile accepts it."""

from __future__ import annotations

import os

import ember.frontend as ef
import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("EMBER_PROGRAM_CACHE", "0")


@pytest.mark.parametrize("fn,arity", [(torch.sin, 1), (F.logsigmoid, 1), (torch.add, 2)],
                         ids=["sin", "logsigmoid", "add"])
def test_a_builtin_compiles_to_one_graph(fn: object, arity: int) -> None:
    x = torch.randn(5)
    compiled = ef.compile(fn)  # type: ignore[arg-type]
    torch.testing.assert_close(compiled(*[x] * arity), fn(*[x] * arity))  # type: ignore[operator]
    assert (compiled.stats.graphs, compiled.stats.graph_breaks) == (1, 0)
    assert compiled.__name__ == fn.__name__  # type: ignore[attr-defined]


def test_an_object_with_a_call_method_is_inlined() -> None:
    class Scaled:
        def __init__(self) -> None:
            self.scale = 2.0

        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return x.cos() * self.scale

    obj, x = Scaled(), torch.randn(4)
    compiled = ef.compile(obj)
    torch.testing.assert_close(compiled(x), obj(x))
    obj.scale = 3.0  # an attribute the call read is guarded
    torch.testing.assert_close(compiled(x), obj(x))
    assert compiled.stats.compiles == 2


def test_something_not_callable_is_refused() -> None:
    with pytest.raises(TypeError, match="needs a callable .* got int"):
        ef.compile(5)  # type: ignore[call-overload]
