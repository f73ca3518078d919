"""Module container subclasses (ember.frontend.containers): the items of a
``Sequential`` or ``ModuleList`` subclass that keeps their item reads (torchvision's
``Conv2dNormActivation`` is such a ``Sequential``) are stamped like the containers' own
by the guards' fast path; a subclass that overrides ``__getitem__`` is checked every
call, and iterated in its ``__iter__``'s order; replacing an item, or overriding
``__getitem__`` later, still fails a guard after stamped calls."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ember.runtime.config import patch
from strict_helpers import strict
from torch import nn


class ConvNormAct(nn.Sequential):
    """A ``Sequential`` subclass with its own ``__init__`` only."""

    def __init__(self, width: int) -> None:
        super().__init__(nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU())


class Reversed(nn.Sequential):
    """A ``Sequential`` subclass whose items are read through its own ``__getitem__``."""

    def __getitem__(self, idx: Any) -> Any:
        return list(self._modules.values())[::-1][idx]


class Net(nn.Module):
    def __init__(self, n: int, block: type[nn.Sequential]) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(ConvNormAct(4) for _ in range(n)))
        self.odd = block(nn.Linear(4, 4), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block[0](x) + block(x)  # an item read, and the whole block
        return self.odd[0](x) * 2 + self.odd[1](x)


def _stamped(compiled: Any) -> set[str]:
    (segment,) = compiled._compiled.segments[0]
    stamps = getattr(segment._matcher, "__ember_stamps__", [])
    return {g.where() for s in stamps for g in s.guards}


def _warm(block: type[nn.Sequential]) -> tuple[Net, Any, torch.Tensor]:
    torch.manual_seed(0)
    model = Net(12, block)
    compiled = strict(model)
    x = torch.randn(2, 4)
    for _ in range(5):
        torch.testing.assert_close(compiled(x), model(x))
    assert compiled.stats.recompiles == 0
    return model, compiled, x


def test_the_items_of_a_sequential_subclass_are_stamped() -> None:
    model, compiled, x = _warm(nn.Sequential)
    covered = _stamped(compiled)
    assert {"self.blocks[3][0]", "self.blocks[3][1].weight", "self.blocks[11][2]"} <= covered


def test_a_subclass_with_its_own_getitem_is_checked_every_call() -> None:
    model, compiled, x = _warm(Reversed)
    covered = _stamped(compiled)
    assert "self.blocks[3][0]" in covered
    assert not any(w.startswith("self.odd[") for w in covered), \
        sorted(w for w in covered if "odd" in w)


@pytest.mark.parametrize("mutation, failed", [
    ("item", "type(self.blocks[2][2]) is ReLU (got Sigmoid)"),
    ("getitem_override", "type(self.blocks[0][0]) is Linear (got ReLU)"),
])
def test_a_change_fails_its_guard_after_stamped_calls(mutation: str, failed: str,
                                                      capsys: Any) -> None:
    model, compiled, x = _warm(nn.Sequential)
    blocks: Any = model.blocks
    try:
        if mutation == "item":
            blocks[2][2] = nn.Sigmoid()
        else:
            # every ConvNormAct now reads its items backwards: the class dict changed
            ConvNormAct.__getitem__ = Reversed.__getitem__  # type: ignore[method-assign]
        capsys.readouterr()
        with patch(logs=frozenset({"recompiles"})):
            out = compiled(x)
        log = capsys.readouterr().err
        torch.testing.assert_close(out, model(x))
        # NOTE: an overridden __getitem__ is iterated through the class's own methods,
        # which may take more than one recompile
        assert compiled.stats.recompiles >= 1, (mutation, log)
        assert f"recompiling Net.forward at resume point 0 (entry 2 of at most 8): " \
               f"guard failed: {failed}" in log, (mutation, log)
    finally:
        if "__getitem__" in ConvNormAct.__dict__:
            del ConvNormAct.__getitem__


class ReversedModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seq = Reversed(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 3))
        self.lst = nn.ModuleList([nn.Linear(4, 4), nn.Tanh()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        firsts = [m for m in self.seq]  # Sequential.__iter__: insertion order
        return self.seq(x) + firsts[-1](firsts[0](x)) + self.seq[0](x)  # [0]: the last


def test_iterating_a_subclass_with_its_own_getitem_keeps_the_insertion_order() -> None:
    torch.manual_seed(0)
    model = ReversedModel()
    x = torch.randn(2, 4)
    torch.testing.assert_close(strict(model)(x), model(x))
