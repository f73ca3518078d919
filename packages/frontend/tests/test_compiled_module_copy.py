"""``copy.deepcopy`` of a compiled module (``ember.frontend.compile(module)``): the copy
is the original module deep-copied and compiled again with the same settings. It raised
"cannot pickle 'module' object" (the compiled variants hold code and guards). And an
attribute set on (or deleted from) the compiled module is set on the original, whose
forward reads it."""

from __future__ import annotations

import copy
from pathlib import Path

import ember.frontend as ef
import pytest
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


class _Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.act = torch.nn.ReLU()
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.linear(x)) * self.scale


@pytest.mark.parametrize("capture", ["strict", "trace"])
def test_attributes_set_on_the_compiled_module_reach_the_original(capture: str) -> None:
    # before: set on the wrapper only, and the compiled forward kept reading the original's
    torch.manual_seed(0)
    module = _Scaled()
    compiled = ef.compile(module, options={"capture": capture})
    x = torch.randn(2, 4)
    compiled(x)
    compiled.act = torch.nn.Tanh()
    compiled.scale = 3.0
    assert isinstance(module.act, torch.nn.Tanh) and module.scale == 3.0
    torch.testing.assert_close(compiled(x), torch.tanh(module.linear(x)) * 3.0)
    del compiled.scale
    assert not hasattr(module, "scale")
    compiled.eval()
    assert not compiled.training and not module.training
    compiled.train()
    assert compiled.training and module.training


def test_pickle_and_torch_save_compile_the_loaded_module_again(tmp_path: Path) -> None:
    """As torch.compile's wrapper: pickled as the original module and the settings.
    It raised "Can't pickle local object 'WeakKeyDictionary.__init__.<locals>.remove'"."""
    import pickle

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    compiled = ef.compile(model, backend="aot_eager", dynamic=True)
    x = torch.randn(3, 4)
    want = compiled(x)
    torch.save(compiled, tmp_path / "model.pt")
    for loaded in (pickle.loads(pickle.dumps(compiled)),
                   torch.load(tmp_path / "model.pt", weights_only=False)):
        assert isinstance(loaded, ef.CompiledModule) and loaded._orig_mod is not model
        torch.testing.assert_close(loaded(x), want)
        assert loaded._settings == {"backend": "aot_eager", "mode": None, "fullgraph": False,
                                    "dynamic": True, "options": None}
