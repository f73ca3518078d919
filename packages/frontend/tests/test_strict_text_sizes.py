"""Symbolic sizes made text are specialised (``bytecode/text_values.py``). Before, once
automatic dynamic made ``x.shape`` symbolic, ``f"{x.shape}"`` returned
``'torch.Size([s0, s1])'`` at every later call, silently."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch


def describe(x: torch.Tensor) -> tuple[torch.Tensor, tuple[str, ...]]:
    s = x.shape
    texts = (f"{s}", str(s), repr(s[0]), "%s/%d" % (s, s[1]), "{}-{}".format(*s),
             ",".join(str(d) for d in s), f"{s[0]:03d}", format(s[1], "x"))
    return x * 2, texts


@pytest.mark.parametrize("dynamic", [None, True])
def test_text_of_a_symbolic_size_is_its_value_at_every_call(dynamic: bool | None) -> None:
    compiled = ef.compile(describe, backend="eager", dynamic=dynamic)
    for shape in [(2, 3), (4, 6), (5, 6), (5, 7), (4, 6)]:
        x = torch.ones(*shape)
        out, texts = compiled(x)
        assert texts == describe(x)[1]
        torch.testing.assert_close(out, x * 2)


def test_sizes_not_made_text_stay_symbolic() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, str]:
        return x.reshape(x.shape[0] * x.shape[1]), f"{x.dim()}"

    compiled = ef.compile(f, backend="eager")
    for n in [2, 3, 4, 5]:
        out, text = compiled(torch.ones(n, 3))
        assert text == "2" and out.shape == (n * 3,)
    assert compiled.stats.compiles == 2  # the sweep: static, then symbolic
