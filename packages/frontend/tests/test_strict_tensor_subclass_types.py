"""A tensor input's exact type: code that branches on ``isinstance``/``type`` of a
tensor subclass (or of an ``nn.Parameter``) sees the type of each call's tensor, and a
call with a tensor of another type never reuses the variant captured for the first."""

from __future__ import annotations

import pytest
import torch
from strict_helpers import assert_same, strict


class Marked(torch.Tensor):
    """A subclass without its own ``__torch_function__`` (captured as a plain tensor)."""


def _branch(x: torch.Tensor) -> torch.Tensor:
    if isinstance(x, Marked):
        return x + 1
    return x - 1


def _inputs() -> list[torch.Tensor]:
    return [torch.arange(3.0), torch.arange(3.0).as_subclass(Marked), torch.arange(3.0),
            torch.arange(3.0).as_subclass(Marked)]


@pytest.mark.parametrize("dynamic", [None, True])
def test_isinstance_of_a_subclass_input_is_seen_and_guarded(dynamic: bool | None) -> None:
    compiled = strict(_branch, dynamic=dynamic)
    for x in _inputs():
        got, expected = compiled(x), _branch(x)
        torch.testing.assert_close(got.as_subclass(torch.Tensor),
                                   expected.as_subclass(torch.Tensor))
    assert compiled.stats.compiles == 2


def test_a_subclass_input_first_then_a_plain_one() -> None:
    compiled = strict(_branch)
    for x in reversed(_inputs()):
        torch.testing.assert_close(compiled(x).as_subclass(torch.Tensor),
                                   _branch(x).as_subclass(torch.Tensor))
    assert compiled.stats.compiles == 2


def test_a_parameter_is_not_a_plain_tensor() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
        return x * 2, isinstance(x, torch.nn.Parameter)

    compiled = strict(fn)
    for i in range(4):
        base = torch.arange(3.0) + i
        x = torch.nn.Parameter(base, requires_grad=False) if i % 2 else base
        assert_same(compiled(x), fn(x))
    assert compiled.stats.compiles == 2


def test_the_failed_guard_names_the_type() -> None:
    from ember.frontend.bytecode.sources import LocalSource
    from ember.frontend.guard_model import GUARD_KINDS, tensor_guard

    guard = tensor_guard(LocalSource("x"), torch.zeros(2))
    text = GUARD_KINDS["tensor"].explain(guard, torch.zeros(2).as_subclass(Marked))
    assert text == "type(x) is Tensor (got Marked)", text
