"""The CPU's convolution layout policy (``layout_plan_rules.CONVOLUTION_ANCHORS``,
``weighed``): grouped convolutions ask for channels-last; a class of dense convolutions
is channels-last when its activations hold at least ``ACTIVATIONS_PER_WEIGHT`` times its
weights' elements, and otherwise keeps its traced layout unless a grouped one makes it
channels-last; a channels-last class takes its weights along. (The plan's mechanics
under the GPU's policy: ``test_layout_plan.py``.)"""

from __future__ import annotations

import pytest
import torch
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.lowering.layout import is_channels_last
from ember.inductor.lowering.layout_plan import layout_plan
from ember.inductor.lowering.layout_plan_rules import (
    ACTIVATIONS_PER_WEIGHT,
    CONVOLUTION_ANCHORS,
    anchors_on_device,
    weighs_on_device,
)
from ember.inductor.passes import run_passes
from test_layout_plan import conv_bn_relu_stack, convolution_calls, strides_of, training_program
from torch import nn

pytest.importorskip("ember.aot")
pytest.importorskip("ember.frontend")


def depthwise_stack(c: int = 8) -> nn.Module:
    """A dense 1x1 convolution, a depthwise 3x3 and a dense 1x1 (MobileNet's block)."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU6(),
        nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), nn.BatchNorm2d(c), nn.ReLU6(),
        nn.Conv2d(c, 2 * c, 1, bias=False), nn.BatchNorm2d(2 * c),
    ).train()


def test_the_policy_table() -> None:
    assert CONVOLUTION_ANCHORS == {"cuda": "all", "cpu": "weighed"}
    assert weighs_on_device("cpu") and not weighs_on_device("cuda")
    conv = "aten::convolution.default"
    dense = (None, None, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    grouped = dense[:8] + (4,)
    assert anchors_on_device(conv, dense, "cuda") and anchors_on_device(conv, grouped, "cuda")
    assert not anchors_on_device(conv, dense, "cpu") and anchors_on_device(conv, grouped, "cpu")
    assert anchors_on_device(conv, dense, "xpu")  # another device: every convolution asks
    backward = ("aten::convolution_backward.default",
                (None,) * 9 + (1, [True, True, False]))
    assert not anchors_on_device(*backward, "cpu")


def test_a_weight_heavy_dense_stack_keeps_its_traced_layouts_on_cpu() -> None:
    program = training_program(conv_bn_relu_stack(), torch.randn(2, 3, 8, 8))
    _, plan = layout_plan(program)
    (line,) = plan.weighed
    assert line.startswith("6 dense convolutions: activations ") and line.endswith(
        f"channels-last from {ACTIVATIONS_PER_WEIGHT}x): kept as traced"), line
    assert plan.describe() == line  # no channels-last values
    planned = run_passes(program)
    for graph in ("forward", "backward"):
        lowered = GraphLowering(planned, graph).run()
        for call in convolution_calls(lowered):
            assert not is_channels_last(*strides_of(lowered, call.args[0])), call


def test_an_activation_heavy_dense_stack_is_channels_last_with_its_weights() -> None:
    import copy

    import ember.frontend

    x = torch.randn(2, 3, 32, 32)  # the same stack on 16 times the pixels
    program = training_program(conv_bn_relu_stack(), x)
    _, plan = layout_plan(program)
    (line,) = plan.weighed
    assert line.endswith("): channels-last"), line
    assert plan.channels_last["forward"] and plan.channels_last["backward"]
    planned = run_passes(program)
    for graph in ("forward", "backward"):
        lowered = GraphLowering(planned, graph).run()
        calls = convolution_calls(lowered)
        assert len(calls) == 3
        for call in calls:
            for arg in call.args[:2]:
                assert is_channels_last(*strides_of(lowered, arg)), call
    module = conv_bn_relu_stack()
    eager = copy.deepcopy(module)
    compiled = ember.frontend.compile(module, backend="inductor")
    got, want = compiled(x), eager(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    got.sum().backward()
    want.sum().backward()
    for p, q in zip(module.parameters(), eager.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-3)


def test_a_depthwise_block_is_channels_last_with_its_dense_neighbours_and_weights() -> None:
    program = training_program(depthwise_stack(), torch.randn(2, 3, 8, 8))
    _, plan = layout_plan(program)
    assert plan.channels_last["forward"] and plan.channels_last["backward"]
    planned = run_passes(program)
    lowered = GraphLowering(planned, "backward").run()
    calls = convolution_calls(lowered)
    assert len(calls) == 3
    for call in calls:
        # grad_output, input and weight: the dense 1x1 ones too (a 1x1 weight's
        # channels-last layout is row-major too)
        for arg in call.args[:2]:
            assert is_channels_last(*strides_of(lowered, arg)), call


def test_both_policies_match_eager_on_a_depthwise_block(monkeypatch: pytest.MonkeyPatch) -> None:
    import copy

    import ember.frontend

    for policy in ("grouped", "all"):
        monkeypatch.setitem(CONVOLUTION_ANCHORS, "cpu", policy)
        module = depthwise_stack()
        eager = copy.deepcopy(module)
        x = torch.randn(2, 3, 8, 8)
        compiled = ember.frontend.compile(module, backend="inductor")
        got, want = compiled(x), eager(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        got.sum().backward()
        want.sum().backward()
        for p, q in zip(module.parameters(), eager.parameters()):
            assert p.grad is not None and q.grad is not None
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-3)
