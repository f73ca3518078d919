"""Writes and deletes of class attributes inside a compiled function
(``type(self).count += 1``, ``Cls.flag = True``, ``del Cls.flag``) are captured like
other attribute writes: replayed on the real class after the graph, in program order,
seen by later reads of the capture (through the class, a subclass or an instance), and
the reads are guarded, so a value changed outside recompiles. Before, each write was a
graph break ("attribute write .count on a type goes through a descriptor Ember cannot
run")."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from strict_helpers import strict


class Counter(torch.nn.Module):
    count = 0
    flag = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        type(self).count += 1
        Counter.flag = True
        return x * self.count  # the instance sees the class's new value


class SubCounter(Counter):
    pass


def test_class_attribute_writes_are_replayed_without_a_break() -> None:
    Counter.count, Counter.flag = 0, False
    compiled = strict(Counter(), fullgraph=True)
    x = torch.ones(3)
    for n in (1, 2, 3):
        torch.testing.assert_close(compiled(x), x * n)
        assert Counter.count == n and Counter.flag is True
    assert compiled.stats.graph_breaks == 0
    assert "count" not in vars(SubCounter)
    # a subclass instance: type(self) is SubCounter, the write lands there
    sub = strict(SubCounter(), fullgraph=True)
    torch.testing.assert_close(sub(x), x * 4)
    assert SubCounter.count == 4 and Counter.count == 3


class Flags:
    enabled = True
    scale = 2.0


def toggled(x: torch.Tensor) -> torch.Tensor:
    y = x * Flags.scale if Flags.enabled else x
    Flags.enabled = not Flags.enabled
    Flags.scale = 3.0
    return y * Flags.scale


def test_reads_of_written_class_attributes_are_guarded() -> None:
    Flags.enabled, Flags.scale = True, 2.0
    compiled = strict(toggled, fullgraph=True)
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x), x * 6)
    assert Flags.enabled is False and Flags.scale == 3.0
    torch.testing.assert_close(compiled(x), x * 3)  # the other branch: recompiled
    assert Flags.enabled is True
    torch.testing.assert_close(compiled(x), x * 9)
    Flags.scale = 5.0  # changed outside: the guard on the read fails
    torch.testing.assert_close(compiled(x), x * 3)
    assert compiled.stats.graph_breaks == 0


class Base:
    mode = "base"


class Child(Base):
    pass


def shadowing(x: torch.Tensor) -> Any:
    Child.mode = "child"
    seen = (Child.mode, Base.mode)
    del Child.mode
    return x + 1, seen, Child.mode


def test_write_then_delete_on_a_subclass_reads_the_base_again() -> None:
    compiled = strict(shadowing, fullgraph=True)
    out, seen, after = compiled(torch.zeros(1))
    torch.testing.assert_close(out, torch.ones(1))
    assert seen == ("child", "base") and after == "base"
    assert "mode" not in vars(Child)


def deleting_missing(x: torch.Tensor) -> torch.Tensor:
    del Child.mode  # only Base has it: AttributeError, as in eager
    return x


def test_deleting_an_inherited_class_attribute_raises_as_in_eager() -> None:
    with pytest.raises(AttributeError):
        deleting_missing(torch.zeros(1))
    with pytest.raises(AttributeError):
        strict(deleting_missing)(torch.zeros(1))


class Holder:
    def helper(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


_HELPER = Holder.helper


def replaces_a_method(x: torch.Tensor, h: Holder) -> torch.Tensor:
    Holder.helper = lambda self, t: t * 10  # type: ignore[method-assign]
    cache = x * 2
    Holder.cache = cache  # type: ignore[attr-defined]  # a tensor the graph made
    return h.helper(x)


def test_a_method_and_a_tensor_written_on_a_class() -> None:
    try:
        compiled = strict(replaces_a_method, fullgraph=True)
        x = torch.ones(2)
        torch.testing.assert_close(compiled(x, Holder()), x * 10)
        torch.testing.assert_close(Holder.cache, x * 2)  # type: ignore[attr-defined]
        assert type(Holder.cache) is torch.Tensor  # type: ignore[attr-defined]
    finally:
        Holder.helper = _HELPER  # type: ignore[method-assign]
        del Holder.cache  # type: ignore[attr-defined]


def writes_a_builtin_class(x: torch.Tensor) -> torch.Tensor:
    int.extra = 1  # type: ignore[attr-defined]  # TypeError in eager
    return x


def test_a_write_python_refuses_still_raises() -> None:
    with pytest.raises(TypeError):
        strict(writes_a_builtin_class)(torch.zeros(1))
