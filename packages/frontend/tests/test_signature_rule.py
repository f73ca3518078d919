"""``inspect.signature`` of a module's bound method (HF's ``apply_chunking_to_forward``)
guards the method's function, not the module's identity: the layers share compiled
code, the guards are portable, and a changed method still recompiles."""

from __future__ import annotations

import inspect

import torch
from ember.frontend.bytecode.sources import MethodFuncSource
from strict_helpers import strict
from torch import nn


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def chunk(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = len(inspect.signature(self.chunk).parameters)
        return self.chunk(x) * n


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _chunk_with_scale(self: Layer, x: torch.Tensor, scale: float = 3.0) -> torch.Tensor:
    return self.fc(x) * scale


def test_a_method_signature_is_guarded_by_its_function() -> None:
    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 8)
    compiled = strict(model)
    torch.testing.assert_close(compiled(x), model(x))
    guards = compiled._compiled.guard_text()
    assert "self.layers[0] is <" not in guards, guards  # no module pinned by identity
    assert "self.layers[0].chunk.__func__" in guards, guards
    # read as a module's method is (MethodFuncSource), which the guard stamp covers
    (segment,) = compiled._compiled.segments[0]
    funcs = [g.source for g in segment.guards.guards
             if g.where() == "self.layers[0].chunk.__func__"]
    assert funcs and all(isinstance(s, MethodFuncSource) for s in funcs), funcs
    # a method with another signature: the guard fails, the capture sees it
    setattr(Layer, "chunk", _chunk_with_scale)
    try:
        torch.testing.assert_close(compiled(x), model(x))
    finally:
        setattr(Layer, "chunk", _original)
    assert compiled.stats.recompiles == 1


_original = Layer.chunk
