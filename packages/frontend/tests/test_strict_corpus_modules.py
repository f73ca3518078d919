"""Strict capture corpus, modules: each case compares with eager and asserts the number
of graphs, graph breaks and compiles (functions: ``test_strict_corpus.py``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from strict_helpers import check
from torch import nn


def r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


class Block(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return x + self.norm(F.gelu(self.fc(x)))


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])
        self.heads = nn.ModuleDict({"a": nn.Linear(8, 2), "b": nn.Linear(8, 3)})
        self.seq = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
        self.register_buffer("bias", torch.randn(8))

    def forward(self, x):
        x = self.seq(x) + self.bias
        for i, blk in enumerate(self.blocks):
            if i % 2 == 0:
                x = blk(x)
        return {k: head(x) for k, head in self.heads.items()}


class WithHelper(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.use_relu = True

    def act(self, x):
        return x.relu() if self.use_relu else x.tanh()

    def forward(self, x):
        return self.act(x @ self.w)


class Derived(WithHelper):
    def forward(self, x):
        return super().forward(x) * 3


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return self.pool(F.relu(self.bn(self.conv(x)))).flatten(1)


class ParamListNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.weights = nn.ParameterList([nn.Parameter(torch.randn(4, 4)) for _ in range(2)])
        self.names = ["first", "second"]

    def forward(self, x, *, residual=True):
        out = x
        for w in self.weights:
            out = out @ w
        return out + x if residual else out


class GetattrNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.branch_a = nn.Linear(4, 4)
        self.branch_b = nn.Linear(4, 4)
        self.order = ("a", "b")

    def forward(self, x):
        for tag in self.order:
            x = getattr(self, f"branch_{tag}")(x)
        return x


class DictNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleDict({"up": nn.Linear(4, 8), "down": nn.Linear(8, 4)})

    def forward(self, inputs):
        x = inputs["x"]
        for name, layer in self.layers.items():  # noqa: PERF102 - tests items()
            x = layer(x)
        return {"out": x, "n": len(self.layers)}


def c_nested_module_call(x):
    return _STACK(x)


def c_getattr_hasattr(x):
    lin = _STACK
    fn = torch.tanh
    return fn(x) if hasattr(lin, "forward") else x


_STACK = Stack().eval()


MODULES = {
    "block": (Block, lambda: (r(4, 8),), 1, 0),
    "stack": (Stack, lambda: (r(4, 8),), 1, 0),
    "with_helper": (WithHelper, lambda: (r(3, 4),), 1, 0),
    "derived_super": (Derived, lambda: (r(3, 4),), 1, 0),
    "convnet_eval": (lambda: ConvNet().eval(), lambda: (r(2, 3, 8, 8),), 1, 0),
    "convnet_train": (ConvNet, lambda: (r(2, 3, 8, 8),), 1, 0),
    "param_list": (ParamListNet, lambda: (r(3, 4),), 1, 0),
    "getattr_dispatch": (GetattrNet, lambda: (r(3, 4),), 1, 0),
    "module_dict_input": (DictNet, lambda: ({"x": r(2, 4)},), 1, 0),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module(name):
    torch.manual_seed(0)
    make, make_args, graphs, breaks = MODULES[name]
    mod = make()
    check(mod, *make_args(), graphs=graphs, breaks=breaks, compiles=graphs + breaks)


@pytest.mark.parametrize("fn,make_args", [(c_nested_module_call, lambda: (r(4, 8),)),
                                           (c_getattr_hasattr, lambda: (r(3),))],
                         ids=["c_nested_module_call", "c_getattr_hasattr"])
def test_function_using_a_module(fn, make_args):
    torch.manual_seed(0)
    check(fn, *make_args(), graphs=1, breaks=0, compiles=1)
