"""Every op of the layout plan's rule table (``lowering/layout_plan_rules.py``) is
covered: each following op, put between two convolutions, ends up channels-last in the
plan; each op of the table has a lowering (or is an extern call)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from ember.inductor.lowering.layout_plan import layout_plan
from ember.inductor.lowering.layout_plan_rules import LAYOUT_RULES
from ember.inductor.lowering.registry import EXTERN_OPS, LOWERINGS

sys.path.insert(0, str(Path(__file__).parent))

from helpers import trace

# the GPU's convolution layouts on CPU tensors (conftest.gpu_convolution_layouts)
pytestmark = pytest.mark.usefixtures("gpu_convolution_layouts")

aten = torch.ops.aten
W = torch.randn(4, 4, 3, 3)


def conv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = aten.convolution.default(x, w, None, [1, 1], [1, 1], [1, 1], False,
                                                 [0, 0], 1)
    return out


def pool_backward(y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    pooled, indices = aten.max_pool2d_with_indices.default(y, [2, 2], [2, 2])
    grad = conv(pooled, w)
    out: torch.Tensor = aten.max_pool2d_with_indices_backward.default(
        grad, y, [2, 2], [2, 2], [0, 0], [1, 1], False, indices)
    return out


def avg_backward(y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    grad = conv(aten.avg_pool2d.default(y, [2, 2], [2, 2]), w)
    out: torch.Tensor = aten.avg_pool2d_backward.default(grad, y, [2, 2], [2, 2], [0, 0],
                                                         False, True, None)
    return out


# op -> (the value between the convolutions, the node whose result the plan must mark)
CASES: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], str]] = {
    "aten::relu.default": (lambda y, w: aten.relu.default(y), "relu"),
    "aten::threshold_backward.default": (
        lambda y, w: aten.threshold_backward.default(y, y, 0.0), "threshold_backward"),
    "aten::hardtanh.default": (lambda y, w: aten.hardtanh.default(y), "hardtanh"),
    "aten::clamp_min.default": (lambda y, w: aten.clamp_min.default(y, 0.0), "clamp_min"),
    "aten::leaky_relu.default": (lambda y, w: aten.leaky_relu.default(y), "leaky_relu"),
    "aten::sigmoid.default": (lambda y, w: aten.sigmoid.default(y), "sigmoid"),
    "aten::silu.default": (lambda y, w: aten.silu.default(y), "silu"),
    "aten::gelu.default": (lambda y, w: aten.gelu.default(y), "gelu"),
    "aten::add.Tensor": (lambda y, w: aten.add.Tensor(y, conv(y, w)), "add"),
    "aten::sub.Tensor": (lambda y, w: aten.sub.Tensor(y, conv(y, w)), "sub"),
    "aten::mul.Tensor": (lambda y, w: aten.mul.Tensor(y, conv(y, w)), "mul"),
    "aten::div.Tensor": (lambda y, w: aten.div.Tensor(y, 2.0 + conv(y, w).abs()), "div"),
    "aten::neg.default": (lambda y, w: aten.neg.default(y), "neg"),
    "aten::le.Scalar": (
        lambda y, w: aten.where.self(aten.le.Scalar(y, 0), y, 2.0 * y), "le"),
    "aten::where.self": (
        lambda y, w: aten.where.self(aten.le.Scalar(y, 0), y, 2.0 * y), "where"),
    "aten::alias.default": (lambda y, w: aten.alias.default(y) * 2, "alias"),
    "aten::clone.default": (lambda y, w: aten.clone.default(y), "clone"),
    "aten::_to_copy.default": (
        lambda y, w: aten._to_copy.default(y, dtype=torch.float64).float(), "_to_copy"),
    "aten::max_pool2d_with_indices.default": (
        lambda y, w: aten.max_pool2d_with_indices.default(y, [2, 2], [2, 2])[0],
        "max_pool2d_with_indices.0"),
    "aten::max_pool2d_with_indices_backward.default": (
        pool_backward, "max_pool2d_with_indices_backward"),
    "aten::avg_pool2d.default": (
        lambda y, w: aten.avg_pool2d.default(y, [2, 2], [2, 2]), "avg_pool2d"),
    "aten::avg_pool2d_backward.default": (avg_backward, "avg_pool2d_backward"),
}


def test_every_op_of_the_table_has_a_case_and_a_lowering() -> None:
    anchors = {op for op, rule in LAYOUT_RULES.items() if rule.channels_last}
    assert anchors == {"aten::convolution.default", "aten::convolution_backward.default"}
    assert set(CASES) == set(LAYOUT_RULES) - anchors
    for op in LAYOUT_RULES:
        assert op in LOWERINGS or op in EXTERN_OPS, op


@pytest.mark.parametrize("op", sorted(CASES))
def test_a_following_op_between_convolutions_is_channels_last(op: str) -> None:
    between, name = CASES[op]

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return conv(between(conv(x, w), w), w)

    program = trace(f, [torch.randn(1, 4, 6, 6), W])
    assert any(n.target == op for n in program.forward.calls()), op
    _, plan = layout_plan(program)
    assert name in plan.channels_last["forward"], plan.describe()


def test_an_op_outside_the_table_separates_layouts() -> None:
    """A ``permute`` between a convolution and a pointwise op is no rule's: the
    convolution's result is channels-last, the permuted value and what is computed from
    it keep their traced layouts (they are not in a convolution's class)."""
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = aten.relu.default(conv(x, w))
        out: torch.Tensor = aten.mul.Tensor(aten.permute.default(y, [0, 2, 3, 1]), y.sum())
        return out

    _, plan = layout_plan(trace(f, [torch.randn(1, 4, 6, 6), W]))
    assert plan.channels_last["forward"] == ["convolution", "relu"]
    assert plan.pinned == ["forward:in0", "forward:in1"]  # not the output (mul)


def test_a_custom_operator_gets_its_argument_in_the_traced_layout() -> None:
    """A value between convolutions that a custom operator also reads keeps its traced
    layout: the operator's code may assume it."""
    @torch.library.custom_op("ember_layout_plan_test::double", mutates_args=())
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @double.register_fake
    def _fake(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = aten.relu.default(conv(x, w))
        out: torch.Tensor = conv(y, w) + double(y)
        return out

    _, plan = layout_plan(trace(f, [torch.randn(1, 4, 6, 6), W]))
    assert "forward:relu" in plan.pinned
    assert "relu" not in plan.channels_last["forward"]
    assert "convolution" in plan.channels_last["forward"]


def test_a_transposed_convolution_is_not_an_anchor() -> None:
    """The lowering leaves transposed convolutions as traced; so does the plan."""
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = aten.relu.default(x * 2)
        out: torch.Tensor = aten.convolution.default(y, w, None, [1, 1], [1, 1], [1, 1], True,
                                                     [0, 0], 1)
        return out * 3

    _, plan = layout_plan(trace(f, [torch.randn(1, 4, 6, 6), W]))
    assert plan.channels_last["forward"] == []
