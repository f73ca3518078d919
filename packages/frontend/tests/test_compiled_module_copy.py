"""``copy.deepcopy`` of a compiled module (``ember.frontend.compile(module)``): the copy
is the original module deep-copied and compiled again with the same settings. It raised
"cannot pickle 'module' object" (the compiled variants hold code and guards)."""

from __future__ import annotations

import copy

import ember.frontend as ef
import torch
from torch import nn


def test_a_deep_copy_is_compiled_again_and_independent() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    compiled = ef.compile(model, dynamic=False)
    x = torch.randn(3, 4)
    first = copy.deepcopy(compiled)  # before any call
    want = model(x)
    torch.testing.assert_close(compiled(x), want)
    second = copy.deepcopy(compiled)  # after one
    for twin in (first, second):
        assert isinstance(twin, ef.CompiledModule) and twin._orig_mod is not model
        torch.testing.assert_close(twin(x), want)
    with torch.no_grad():
        second._orig_mod[0].weight.add_(1.0)
    torch.testing.assert_close(compiled(x), want)  # the original is not the copy
    torch.testing.assert_close(second(x), second._orig_mod(x))
    assert second.stats.compiles == 1


def test_a_compiled_function_calling_compiled_code_captures_it_whole() -> None:
    # the inner compiled function was inlined as Ember's own call machinery: four graph
    # breaks (a lock, CompiledFunction.apply, ...) and five compiles
    torch.manual_seed(0)
    layer = nn.Linear(4, 4)
    inner = ef.compile(lambda x: torch.tanh(layer(x)))
    inner_module = ef.compile(nn.Linear(4, 4))

    def outer(x: torch.Tensor) -> torch.Tensor:
        return inner_module(inner(x) * 2).sum()

    compiled = ef.compile(outer)
    x = torch.randn(3, 4, requires_grad=True)
    got = compiled(x)
    got.backward()
    grad = x.grad
    x.grad = None
    want = outer(x)
    want.backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad, x.grad)
    assert compiled.stats.graph_breaks == 0 and compiled.stats.graphs == 1
