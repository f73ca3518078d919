"""A tensor made inside a strict capture that requires grad as a new autograd leaf
(``torch.zeros(..., requires_grad=True)``, ``t.detach().requires_grad_()``) cannot be a
graph output that requires grad: before, it came back with ``requires_grad`` False
(silently wrong: no gradient, ``y.requires_grad`` False for a result computed from it).
The call now breaks (``bytecode/recorded_calls.py``), and runs eagerly."""

from __future__ import annotations

import copy

import ember.frontend
import torch
from strict_helpers import strict


def _flags(v):
    return [t.requires_grad for t in (v if isinstance(v, tuple) else (v,))
            if isinstance(t, torch.Tensor)]


def detached_requires_grad(x):
    z = x.detach().requires_grad_()
    y = (z * 2).sum()
    return y, z


def factory_requires_grad(x):
    z = torch.zeros(2, requires_grad=True)
    return z, z * x


def deepcopy_leaf(x):
    z = copy.deepcopy(x)  # a new leaf that requires grad, in eager
    return z * 2, z.is_leaf, z.requires_grad


def test_new_leaves_keep_requires_grad() -> None:
    for fn, x in ((detached_requires_grad, torch.ones(2)),
                  (factory_requires_grad, torch.ones(2)),
                  (deepcopy_leaf, torch.ones(2, requires_grad=True))):
        compiled = strict(fn)
        for _ in range(2):
            got, expected = compiled(x), fn(x)
            assert _flags(got) == _flags(expected), fn.__name__
            if fn is deepcopy_leaf:
                assert got[1:] == expected[1:]
        assert compiled.stats.graph_breaks >= 1
        assert "requires grad" in compiled.breaks[0].reason
        assert "FakeTensor" not in compiled.breaks[0].reason


def test_requires_grad_flag_change_of_an_input_breaks() -> None:
    def f(x):
        x.requires_grad_(False)
        return x * 2

    compiled = strict(f)
    x = torch.ones(2, requires_grad=True)
    compiled(x)
    assert not x.requires_grad  # the real input changed, as in eager
    assert "changing whether an input requires grad" in compiled.breaks[0].reason


def test_requires_grad_without_change_stays_in_the_graph() -> None:
    def f(x):
        return x.requires_grad_() * 2

    compiled = strict(f)
    x = torch.ones(2, requires_grad=True)
    assert compiled(x).requires_grad
    assert compiled.stats.graph_breaks == 0


def test_a_view_of_a_parameter_under_no_grad_is_no_new_leaf() -> None:
    """torchvision's ViT: ``self.class_token.expand(n, -1, -1)`` in an inference call.
    Under no_grad a view of a parameter is a leaf that requires grad in eager too (its
    flag is its base's): it is captured, no break."""

    class Tokens(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.token = torch.nn.Parameter(torch.randn(1, 1, 8))
            self.proj = torch.nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            t = self.token.expand(x.shape[0], -1, -1)
            return self.proj(torch.cat([t, x], 1))

    model = Tokens()
    compiled = ember.frontend.compile(model)
    x = torch.randn(2, 3, 8)
    with torch.no_grad():
        out = compiled(x)
        expected = model(x)
    torch.testing.assert_close(out, expected)
    assert compiled.stats.graph_breaks == 0 and compiled.stats.graphs == 1
