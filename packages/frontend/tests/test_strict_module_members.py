"""Parameters of submodules reached through containers made by code run for real.

``self.layers[:n]`` (transformers' decoder loop), ``self.children()`` and a sliced
``Sequential`` hand the interpreter submodules without a source; their parameters must
still be graph inputs (gradients flow to them, a replaced parameter is seen), not
constants of the first call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import torch
from strict_helpers import strict
from torch import nn

Layers = Callable[[Any], Iterable[nn.Module]]

WAYS: dict[str, Layers] = {
    "modulelist_slice": lambda m: m.layers[: m.depth],
    "sequential_slice": lambda m: m.seq[0:2],
    "children": lambda m: m.layers.children(),
    "nested_slice": lambda m: m.blocks[0][:2],
}


class Stack(nn.Module):
    def __init__(self, way: Layers) -> None:
        super().__init__()
        self.depth = 2
        self.way = way
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
        self.seq = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
        self.blocks = nn.ModuleList([nn.ModuleList(nn.Linear(4, 4) for _ in range(2))])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.way(self):
            x = torch.tanh(layer(x))
        return x


@pytest.mark.parametrize("way", list(WAYS))
def test_submodule_parameters_get_gradients(way: str) -> None:
    torch.manual_seed(0)
    model = Stack(WAYS[way])
    x = torch.randn(3, 4)
    expected = model(x)
    expected.sum().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert want, "the eager model computed no gradient"
    model.zero_grad(set_to_none=True)
    compiled = strict(model)
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        got = compiled(x)
        assert got.requires_grad, "the layers' parameters were captured as constants"
        torch.testing.assert_close(got, expected)
        got.sum().backward()
        have = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        assert have.keys() == want.keys()
        for name, grad in want.items():
            torch.testing.assert_close(have[name], grad)
    assert compiled.stats.graphs == 1 and compiled.stats.graph_breaks == 0


def test_replaced_parameter_of_sliced_layer_is_read() -> None:
    torch.manual_seed(0)
    model = Stack(WAYS["modulelist_slice"])
    compiled = strict(model)
    x = torch.randn(3, 4)
    with torch.no_grad():
        compiled(x)
        model.layers[1].weight = nn.Parameter(torch.randn(4, 4))
        torch.testing.assert_close(compiled(x), model(x))


def test_registered_buffers_are_labelled_buffers(tmp_path: Path) -> None:
    """The strict capture labels a module's registered buffers (read from its
    ``_buffers``) BUFFER and its parameters PARAMETER, each with its qualified name, as
    the tracing capture does: the runtime keeps them in place (CUDA graphs) and does not
    treat them as user inputs."""
    import ember.frontend as ef
    from ember.runtime.config import patch
    from ember.runtime.ir import InputKind, load

    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    compiled = ef.compile(model, backend="aot_eager")
    with patch(debug_dir=tmp_path, program_cache=False, capture_cache=False):
        compiled(torch.randn(8, 4))
    program = load(tmp_path / "1_aot.ember", trusted=True)
    kinds = {s.target: s.kind for s in program.signature.inputs["forward"]
             if s.kind is not InputKind.USER_INPUT}
    assert kinds == {
        "0.weight": InputKind.PARAMETER, "0.bias": InputKind.PARAMETER,
        "1.weight": InputKind.PARAMETER, "1.bias": InputKind.PARAMETER,
        "1.running_mean": InputKind.BUFFER, "1.running_var": InputKind.BUFFER,
        "1.num_batches_tracked": InputKind.BUFFER}


class _PropertyModule(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self._scale = 1.0

    @property
    def scale(self) -> float:
        return self._scale

    @scale.setter
    def scale(self, value: float) -> None:
        self._scale = min(value, 3.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.scale = self.scale + 1
        return x * self.scale


def test_a_property_setter_of_a_module_is_seen_by_later_reads() -> None:
    # before: the write was recorded under the property's name and replayed after the
    # graph; the read after it ran the getter on the old _scale (x * 1, eager x * 2)
    eager, traced = _PropertyModule(), _PropertyModule()
    compiled = strict(traced)
    for _ in range(4):
        torch.testing.assert_close(compiled(torch.ones(2)), eager(torch.ones(2)))
        assert traced._scale == eager._scale
