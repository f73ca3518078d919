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
