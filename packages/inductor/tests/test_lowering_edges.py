"""Edge shapes through the whole pipeline, and what a failing lowering rule does: only
``NotLowerable`` means "run this op eagerly"; any other exception is a bug in the rule
(strict lowering raises it, otherwise a warned fallback)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.compile import InductorFallbackWarning, compile_program
from ember.inductor.lowering.graph_lowering import GraphLowering, LoweringError
from ember.inductor.lowering.registry import LOWERINGS, NotLowerable
from helpers import compile_fn, trace


def _broken_rule(*args: Any, **kwargs: Any) -> Any:
    raise IndexError("tuple index out of range")  # as a rule crashing on an edge shape


def _not_lowerable(*args: Any, **kwargs: Any) -> Any:
    raise NotLowerable("this call is not supported")


def test_a_rule_error_raises_not_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only NotLowerable turns into a fallback: any other exception of a rule is a bug,
    raised as a LoweringError naming the rule and the node (it used to become a fallback
    of that one op unless ``strict``)."""
    monkeypatch.setitem(LOWERINGS, "aten::exp.default", _broken_rule)
    program = trace(lambda x: x.exp() + 1, [torch.randn(3)])
    with pytest.raises(LoweringError, match=r"aten::exp.default failed on %exp .*IndexError"
                       ) as raised:
        GraphLowering(program).run()
    assert isinstance(raised.value.__cause__, IndexError)
    with pytest.raises(LoweringError):
        compile_program(program, {"strict": True})


def test_lenient_compile_runs_the_graph_eagerly_on_a_rule_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``strict``, compile_program's graph-level fallback catches the
    LoweringError: the whole graph runs eagerly, with a warning naming the rule."""
    monkeypatch.setitem(LOWERINGS, "aten::exp.default", _broken_rule)
    x = torch.randn(3)
    program = trace(lambda x: x.exp() + 1, [x])
    with pytest.warns(InductorFallbackWarning, match="aten::exp.default failed"):
        compiled = compile_program(program)
    assert compiled.metadata["fallbacks"] == {"aten::add.Tensor": 1, "aten::exp.default": 1}
    assert compiled.metadata["kernels"] == 0


def test_not_lowerable_falls_back_quietly_even_in_strict_mode(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(LOWERINGS, "aten::exp.default", _not_lowerable)
    x = torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InductorFallbackWarning)
        compiled, run = compile_fn(lambda x: x.exp() + 1, x)
    assert compiled.metadata["fallbacks"] == {"aten::exp.default": 1}
    torch.testing.assert_close(run(x)[0], x.exp() + 1)


# Cases from the OpInfo sweep (issue 11 item 14): each lowered without a fallback and
# equal to eager in sizes, strides and values.
EDGE_CASES: dict[str, tuple[Callable[..., Any], list[torch.Tensor]]] = {
    "sum_dim0_of_0d": (lambda x: x.sum(0), [torch.randn(())]),
    "amax_dim0_of_0d": (lambda x: x.amax(0, keepdim=True), [torch.randn(())]),
    "softmax_of_0d": (lambda x: torch.softmax(x, 0), [torch.randn(())]),
    "var_of_0d": (lambda x: x.var(0, correction=0), [torch.randn(())]),
    "argmax_of_0d": (lambda x: x.argmax(0), [torch.randn(())]),
    "sum_over_empty_dim": (lambda x: x.sum(1), [torch.randn(4, 0)]),
    "prod_any_all_over_empty": (lambda x: [x.prod(0), (x > 0).any(), (x > 0).all(1)],
                                [torch.randn(0, 3)]),
    "mean_over_empty_dim": (lambda x: x.mean(-1), [torch.randn(3, 0)]),
    "stack_of_empty": (lambda a, b: torch.cat([a, b]).view(2, *a.shape),
                       [torch.randn(0, 3), torch.randn(0, 3)]),
    "avg_pool1d_of_empty": (lambda x: F.avg_pool1d(x, 2), [torch.randn(0, 3, 4)]),
    "unfold": (lambda x: x.unfold(1, 2, 1) * 2, [torch.randn(3, 4)]),
    "unfold_of_empty": (lambda x: x.unfold(1, 2, 1) * 2, [torch.randn(0, 4)]),
}


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_edge_shape_lowers_and_matches_eager(name: str) -> None:
    fn, inputs = EDGE_CASES[name]
    compiled, run = compile_fn(fn, *inputs)
    assert compiled.metadata["fallbacks"] == {}
    expected = fn(*inputs)
    expected = expected if isinstance(expected, list) else [expected]
    for got, want in zip(run(*inputs), expected, strict=True):
        torch.testing.assert_close(got, want, equal_nan=True)
        assert got.shape == want.shape
        assert got.stride() == want.stride() or got.numel() <= 1


def test_matmul_1d_by_2d_keeps_eager_shape() -> None:
    import ember.frontend as ef

    a, b = torch.randn(3), torch.randn(3, 5)
    for backend in ("aot_eager", "inductor"):
        out = ef.compile(lambda a, b: torch.matmul(a, b), backend=backend)(a, b)
        assert out.shape == (5,)
        torch.testing.assert_close(out, a @ b)


def test_quantile_of_0d_keeps_eager_shape() -> None:
    import ember.frontend as ef

    x = torch.randn(())
    out = ef.compile(lambda x: torch.quantile(x, 0.5), backend="inductor")(x)
    assert out.shape == ()
    torch.testing.assert_close(out, torch.quantile(x, 0.5))
