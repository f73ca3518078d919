"""Value checks of eager kernels that a recording on fake tensors skips
(``ember.runtime.checked_calls``): each function of ``CHECKED_CALLS`` raises on bad
values when the compiled program runs, as eager does, in both capture modes, with
symbolic sizes, and through ``torch.compile(backend="ember")``; good values match
eager. ``F.one_hot`` of a class out of range returned an all-zero row, silently."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import pytest
import torch
import torch.nn.functional as F
from ember.runtime.checked_calls import CHECKED_CALLS

# function -> (a program calling it, good input, bad inputs, the compiled error)
CASES: dict[Any, tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor,
                       list[torch.Tensor], str]] = {
    F.one_hot: (lambda i: F.one_hot(i, 4) * 2, torch.tensor([0, 3, 1]),
                           [torch.tensor([4, 0, 1]), torch.tensor([0, -1, 2])],
                           "Class values must be"),
}


def test_every_checked_call_has_a_case() -> None:
    assert set(CASES) == set(CHECKED_CALLS)


def _compilers() -> list[tuple[str, Callable[[Any], Any]]]:
    return [
        *[(f"{capture}-dynamic={dynamic}", lambda fn, c=capture, d=dynamic: ef.compile(
            fn, options={"capture": c}, dynamic=d))
          for capture in ("strict", "trace") for dynamic in (False, True)],
        ("torch.compile", lambda fn: torch.compile(fn, backend="ember")),
    ]


@pytest.mark.parametrize("function", list(CASES), ids=lambda f: f.__name__)
@pytest.mark.parametrize(("name", "compiler"), _compilers(), ids=[c[0] for c in _compilers()])
def test_bad_values_raise_as_in_eager(function: Any, name: str,
                                      compiler: Callable[[Any], Any]) -> None:
    torch.compiler.reset()
    program, good, bad, message = CASES[function]
    compiled = compiler(program)
    torch.testing.assert_close(compiled(good), program(good))
    for values in bad:
        with pytest.raises(RuntimeError):
            program(values)
        with pytest.raises(RuntimeError, match=message):
            compiled(values)
