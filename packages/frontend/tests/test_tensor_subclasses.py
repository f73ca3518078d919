"""A tensor whose subclass overrides ``__torch_function__`` (or ``__torch_dispatch__``)
is never captured as a plain tensor (``tensor_subclasses.py``). Before, both capture
modes ran the program on plain fake tensors, skipping the override: a subclass that
scales ``add``'s result gave eager 40 and compiled 4, silently."""

from __future__ import annotations

from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.frontend.trace import CaptureError

CALLS: list[str] = []


class Scaled(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        CALLS.append(getattr(func, "__name__", "?"))
        result = super().__torch_function__(func, types, args, kwargs or {})
        return result * 10 if func is torch.Tensor.add else result


class PlainSubclass(torch.Tensor):
    pass


def _scaled() -> torch.Tensor:
    return torch.ones(3).as_subclass(Scaled)


def add_then_double(x: torch.Tensor) -> torch.Tensor:
    return x.add(1) * 2


def test_an_argument_runs_the_call_eagerly_with_its_override() -> None:
    CALLS.clear()
    expected = add_then_double(_scaled())
    eager_calls = list(CALLS)
    CALLS.clear()
    compiled = ef.compile(add_then_double, backend="eager")
    for _ in range(2):
        out = compiled(_scaled())
        assert type(out) is Scaled
        torch.testing.assert_close(out.as_subclass(torch.Tensor),
                                   expected.as_subclass(torch.Tensor))
    ops = [c for c in CALLS if c != "__get__"]  # (Ember reads sizes and dtypes too)
    assert ops == eager_calls * 2, CALLS  # the override ran at every call
    assert compiled.stats.eager_fallback_calls == 2
    assert "overrides __torch_function__" in compiled.breaks[0].reason


GLOBAL = torch.ones(3)


def test_a_global_breaks_where_it_is_read() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 3  # captured
        return y + GLOBAL.add(1)

    global GLOBAL
    GLOBAL = _scaled()
    try:
        compiled = ef.compile(f, backend="eager")
        torch.testing.assert_close(compiled(torch.ones(3)).as_subclass(torch.Tensor),
                                   f(torch.ones(3)).as_subclass(torch.Tensor))
        assert compiled.stats.graphs == 1  # x * 3; the rest runs eagerly
        assert "overrides __torch_function__" in compiled.breaks[0].reason
    finally:
        GLOBAL = torch.ones(3)


def test_parameters_and_plain_subclasses_are_still_captured() -> None:
    p = torch.nn.Parameter(torch.ones(3))

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * p

    compiled = ef.compile(f, backend="eager", fullgraph=True)
    x = torch.ones(3).as_subclass(PlainSubclass)
    torch.testing.assert_close(compiled(x).as_subclass(torch.Tensor), torch.ones(3))


def test_the_trace_capture_refuses_it_naming_the_argument() -> None:
    compiled = ef.compile(add_then_double, backend="eager", options={"capture": "trace"})
    with pytest.raises(CaptureError, match=r"argument x is a tensor whose class overrides "
                                           r"__torch_function__ of .*Scaled"):
        compiled(_scaled())
