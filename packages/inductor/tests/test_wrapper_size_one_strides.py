"""The wrapper's inline layout tests leave out the strides of size-1 dims: no kernel reads
them, and an input (or extern result) that has another stride there than traced, a view
with a leading 1 as HF BERT's attention backward gets on every call, stays on the fast
path instead of taking ``_check_input`` (and its layout test) each call."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.wrapper import _stride_test
from ember.runtime.compiled import wrapper_support
from helpers import compile_fn


@pytest.mark.parametrize(("sizes", "strides", "same", "differs"), [
    ((2, 8), (8, 1), "x.stride() == (8, 1)", "x.stride() != (8, 1)"),
    ((1, 2, 8, 4), (64, 4, 8, 1), "x.stride()[1:] == (4, 8, 1)", "x.stride()[1:] != (4, 8, 1)"),
    ((8, 1), (1, 1), "x.stride()[:1] == (1,)", "x.stride()[:1] != (1,)"),
    ((1, 5, 1), (5, 1, 1), "x.stride()[1:2] == (1,)", "x.stride()[1:2] != (1,)"),
    ((2, 1, 3), (3, 3, 1), "(_s := x.stride())[0] == 3 and _s[2] == 1",
     "not ((_s := x.stride())[0] == 3 and _s[2] == 1)"),
    ((1, 1), (1, 1), "True", "False"),
])
def test_the_stride_test_table(sizes: tuple[int, ...], strides: tuple[int, ...], same: str,
                               differs: str) -> None:
    assert _stride_test("x", sizes, strides) == same
    assert _stride_test("x", sizes, strides, differs=True) == differs
    for text, want in ((same, True), (differs, False)):  # it evaluates as it reads
        x = torch.empty_strided(sizes, strides)
        assert eval(text, {}, {"x": x}) is want  # the test's own text


def test_an_input_with_another_size_one_stride_stays_on_the_fast_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = wrapper_support.check_input

    def counting(t, name, *rest):  # type: ignore[no-untyped-def]
        calls.append(name)
        return real(t, name, *rest)

    monkeypatch.setattr(wrapper_support, "check_input", counting)
    x = torch.randn(1, 2, 8, 4)
    _, run = compile_fn(lambda a: (a * 2).sum(-1), x)
    # the same values with the leading 1's stride 1 (a permuted view), as traced otherwise
    y = torch.randn(2, 8, 4, 1).permute(3, 0, 1, 2)
    assert y.shape == x.shape and y.stride() == (1, 32, 4, 1) != x.stride()
    (out,) = run(y)
    torch.testing.assert_close(out, (y * 2).sum(-1))
    assert calls == []
    # another stride on a dim of size > 1 still takes the slow path (copied, correct)
    t = torch.randn(1, 2, 4, 8).transpose(2, 3)
    (out,) = run(t)
    torch.testing.assert_close(out, (t * 2).sum(-1))
    assert calls == ["arg0"]
