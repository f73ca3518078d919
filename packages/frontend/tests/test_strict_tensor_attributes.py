"""Python attributes of tensors in strict capture (``bytecode/tensor_attributes.py``):
reads of a graph input's attributes come from the real tensor (before: the fake tensor's,
so ``hasattr(x, "tag")`` was False), writes are captured (before: a break), and
``.grad`` of a tensor the graph made is captured."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from strict_helpers import assert_same, strict
from torch import nn


def _tagged(v: Any = 3) -> torch.Tensor:
    t = torch.ones(2)
    t.tag = v
    return t


def test_hasattr_and_getattr_read_the_real_tensor() -> None:
    # before: silently wrong, hasattr(x, "tag") was False inside the graph
    def f(x):
        if hasattr(x, "tag"):
            return x * getattr(x, "tag", 100), hasattr(x, "fake_mode")
        return x, hasattr(x, "fake_mode")

    compiled = strict(f)
    for t in (_tagged(3), _tagged(3), _tagged(5), torch.ones(2)):
        assert_same(compiled(t), f(t))
    # one entry per tag value, one for a tensor without it
    assert compiled.stats.compiles == 3 and compiled.stats.graph_breaks == 0


def test_parameter_attribute_read() -> None:
    lin = nn.Linear(2, 2)
    lin.weight.tag = 5

    def f(x):
        return x * lin.weight.tag

    compiled = strict(f)
    assert_same(compiled(torch.ones(2)), f(torch.ones(2)))
    assert (compiled.stats.graphs, compiled.stats.graph_breaks) == (1, 0)


def test_write_on_an_input_is_replayed_and_read_back() -> None:
    def f(x):
        x.tag = 7
        y = x * x.tag
        del x.other
        return y, hasattr(x, "other")

    compiled = strict(f)
    for _ in range(2):
        a, b = torch.ones(2), torch.ones(2)
        a.other = b.other = 1
        assert_same(compiled(a), f(b))
        assert a.tag == 7 and not hasattr(a, "other")
    assert (compiled.stats.graphs, compiled.stats.graph_breaks) == (1, 0)


def test_write_on_a_made_tensor() -> None:
    def f(x):
        p = x * 2
        p.tag = 1
        q = x + 1
        q.tag = 2
        del q.tag
        return p * p.tag, hasattr(q, "tag"), p

    compiled = strict(f)
    for _ in range(2):
        got, expected = compiled(torch.ones(2)), f(torch.ones(2))
        assert_same(got[:2], expected[:2])
        assert got[2].tag == 1  # replayed on the returned tensor
    assert (compiled.stats.graphs, compiled.stats.graph_breaks) == (1, 0)


def test_missing_attribute_raises_as_in_eager() -> None:
    def f(x):
        return x.tag

    with pytest.raises(AttributeError, match="'Tensor' object has no attribute 'tag'"):
        strict(f)(torch.ones(2))


def test_property_write_still_breaks() -> None:
    def f(x):
        x.requires_grad = True
        return x * 2

    compiled = strict(f)
    x = torch.ones(2)
    compiled(x)
    assert x.requires_grad
    assert "a tensor property" in compiled.breaks[0].reason
