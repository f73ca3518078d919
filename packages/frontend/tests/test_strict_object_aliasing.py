"""Outside objects reached through two sources (``f(a, a)``, a module held by two
attributes), and written objects that may be one object on a later call: a variant
captured for one aliasing never serves a call with another (it read the second source
through the first, or missed a write showing through the other name)."""

from __future__ import annotations

from typing import Any

import torch
from strict_helpers import strict
from torch import nn


def _lengths(a: list[int], b: list[int]) -> torch.Tensor:
    return torch.ones(1) * (len(a) + 10 * len(b))


def test_the_same_list_twice_then_two_lists() -> None:
    compiled = strict(_lengths)
    shared = [1]
    assert compiled(shared, shared).item() == 11
    assert compiled(shared, [1, 2, 3]).item() == 31
    assert compiled(shared, shared).item() == 11
    assert compiled.stats.compiles == 2


def _append_then_len(x: torch.Tensor, a: list[Any], b: list[Any]) -> torch.Tensor:
    a.append(1)
    return x * len(b)


def test_a_written_list_and_another_then_one_list() -> None:
    compiled = strict(_append_then_len)
    for first_apart in (True, False):
        compiled.reset()
        calls = [False, True, False] if first_apart else [True, False, True]
        for same in calls:
            a: list[Any] = []
            b = a if same else []
            eager_a: list[Any] = []
            eager_b = eager_a if same else []
            expected = _append_then_len(torch.ones(1), eager_a, eager_b)
            assert torch.equal(compiled(torch.ones(1), a, b), expected), (first_apart, same)
            assert a == eager_a and b == eager_b


class _Box:
    def __init__(self, v: float) -> None:
        self.v = v


def _write_then_read(x: torch.Tensor, a: _Box, b: _Box) -> torch.Tensor:
    a.v = 5.0
    return x * b.v


def test_an_attribute_write_seen_through_the_other_name() -> None:
    compiled = strict(_write_then_read)
    for same in (False, True, False):
        a = _Box(2.0)  # b.v reads 2.0 before any write: its guard holds either way
        b = a if same else _Box(2.0)
        expected = 5.0 if same else 2.0
        assert compiled(torch.ones(1), a, b).item() == expected
        assert a.v == 5.0


def test_two_modules_that_were_one() -> None:
    def fn(m1: nn.Module, m2: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return m1(x) + m2(x)

    torch.manual_seed(0)
    l1, l2 = nn.Linear(2, 2), nn.Linear(2, 2)
    compiled = strict(fn)
    x = torch.ones(1, 2)
    for m1, m2 in ((l1, l1), (l1, l2), (l2, l1)):
        torch.testing.assert_close(compiled(m1, m2, x), fn(m1, m2, x))


class _Shared(nn.Module):
    """Two attributes holding one submodule (tied), untied between calls."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(2, 2)
        self.dec = self.enc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dec(self.enc(x))


def test_a_tied_submodule_untied_between_calls() -> None:
    torch.manual_seed(0)
    model = _Shared()
    compiled = strict(model)
    x = torch.ones(1, 2)
    torch.testing.assert_close(compiled(x), model(x))
    model.dec = nn.Linear(2, 2)
    torch.testing.assert_close(compiled(x), model(x))
