"""``generator.send`` on a generator the capture runs (``InlinedGenerator.send``).
Before, it raised ``'InlinedGenerator' object has no attribute 'send'`` inside the
capture and the whole function ran eagerly, naming Ember's class in the break."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import ember.frontend as ef
import pytest
import torch


def running_total(x: torch.Tensor) -> Generator[torch.Tensor, Any, str]:
    total = x
    while True:
        v = yield total
        if v is None:
            return "end"
        total = total + v


def uses_send(x: torch.Tensor) -> tuple[Any, ...]:
    it = running_total(x)
    first = next(it)
    a = it.send(x)
    b = it.send(x * 2)
    try:
        it.send(None)
        end = "not reached"
    except StopIteration as e:
        end = e.value
    return first, a, b, end


def test_send_is_captured_in_one_graph() -> None:
    compiled = ef.compile(uses_send, backend="eager", fullgraph=True)
    out = compiled(torch.ones(2))
    expected = uses_send(torch.ones(2))
    assert out[3] == expected[3] == "end"
    for got, want in zip(out[:3], expected[:3]):
        torch.testing.assert_close(got, want)


def test_close_breaks_with_a_reason_naming_it() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        it = running_total(x)
        next(it)
        a: torch.Tensor = it.send(x)
        it.close()
        return a

    compiled = ef.compile(f, backend="eager")
    torch.testing.assert_close(compiled(torch.ones(2)), f(torch.ones(2)))
    assert "generator.close()" in compiled.breaks[0].reason


def test_a_value_sent_to_a_new_generator_raises_python_s_error() -> None:
    def f(x: torch.Tensor) -> Any:
        return running_total(x).send(x)

    with pytest.raises(TypeError, match="just-started generator"):
        ef.compile(f, backend="eager")(torch.ones(2))
