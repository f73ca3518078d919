"""torch.linalg's errors on bad input (a singular matrix to ``inv``, a matrix that is
not positive definite to ``cholesky``): eager raises ``torch.linalg.LinAlgError`` from
``aten::_linalg_check_errors``, a call whose result nobody reads. Ember kept it only as
dead code and returned NaNs; it is a side effect now (``op_queries.SIDE_EFFECT_OPS``),
run as an extern call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import pytest
import torch

CASES: dict[str, tuple[Callable[..., torch.Tensor], tuple[torch.Tensor, ...]]] = {
    "inv": (lambda a: torch.linalg.inv(a) * 2, (torch.zeros(3, 3),)),
    "inverse": (lambda a: torch.inverse(a) + 1, (torch.zeros(3, 3),)),
    "cholesky": (lambda a: torch.linalg.cholesky(a) * 2, (-torch.eye(3),)),
    "solve": (lambda a, b: torch.linalg.solve(a, b) + 1, (torch.zeros(3, 3), torch.ones(3, 1))),
}


def _compiled(how: str, fn: Callable[..., torch.Tensor]) -> Callable[..., Any]:
    torch.compiler.reset()
    return ef.compile(fn) if how == "frontend" else torch.compile(fn, backend="ember")


@pytest.mark.parametrize("how", ["frontend", "dynamo"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_raises_what_eager_raises(case: str, how: str) -> None:
    fn, args = CASES[case]
    with pytest.raises(torch.linalg.LinAlgError) as eager:
        fn(*args)
    with pytest.raises(torch.linalg.LinAlgError) as compiled:
        _compiled(how, fn)(*args)
    assert str(compiled.value) == str(eager.value)


@pytest.mark.parametrize("how", ["frontend", "dynamo"])
def test_good_input_and_its_gradient_still_match(how: str) -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        return torch.linalg.inv(a).sum()

    a = (torch.randn(4, 4) + 4 * torch.eye(4)).requires_grad_()
    got = _compiled(how, f)(a)
    got.backward()
    grad = a.grad
    a.grad = None
    want = f(a)
    want.backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad, a.grad)
